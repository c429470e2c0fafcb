"""`mirror add`: a registry repository or a URL into the layout.

A repository's files are chosen (all, or those matching `--file` patterns,
with a GGUF's vision projector brought along), compared with the versions
already here (same paths, sizes and checksums → that version, resumed if it
was left incomplete), and otherwise fetched into a new version named after
today. Each file is downloaded once however many ask: tasks of one process
share one download (single-flight), and processes share a lock file beside
the download, so the second to arrive waits and finds the file in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import posixpath
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence
from urllib.parse import unquote

import attrs

from llmgw.mirror.download import Downloaded, DownloadError, download_file, sha256_file
from llmgw.mirror.layout import (
    Layout,
    Origin,
    Sidecar,
    SourceFile,
    check_file_path,
    check_model_name,
    file_lock,
    hidden_sibling,
    model_name_from,
    utc_now,
)
from llmgw.mirror.progress import Progress
from llmgw.mirror.registry import Registry, RepoFile, parse_repo
from llmgw.mirror.safefetch import SafeFetcher, check_url

DEFAULT_MAX_BYTES = 1 << 40  # 1 TiB: a cap for a URL that says nothing of its size

ProgressFactory = Callable[[str], "Progress | None"]


class AddFailed(Exception):
    """Some files of a version could not be fetched; the rest are kept for the next try."""

    def __init__(self, model: str, version: str, problems: Sequence[str]) -> None:
        self.model, self.version, self.problems = model, version, list(problems)
        super().__init__(f"{model}/{version}: " + "; ".join(self.problems))


@attrs.frozen
class AddResult:
    model: str
    version: str
    files: tuple[SourceFile, ...]
    fetched: int = 0  # files downloaded by this call
    reused: int = 0  # files found in place or linked from another version
    already: bool = False  # the version was here whole; nothing was fetched
    unchanged_since: str = ""  # a URL whose bytes are this earlier version's

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)


@attrs.frozen
class _FileResult:
    size: int
    sha256: str
    etag: str
    downloaded: bool


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_projector(path: str) -> bool:
    return is_gguf(path) and "mmproj" in posixpath.basename(path).lower()


def select_files(files: Iterable[RepoFile], patterns: Sequence[str], repo: str = "") -> list[RepoFile]:
    """The files `patterns` pick (all without patterns), and a picked GGUF's projector."""
    candidates = [f for f in files if not any(p.startswith(".") for p in f.path.split("/"))]
    if not patterns:
        return candidates
    chosen: list[RepoFile] = []
    for pattern in patterns:
        pat = pattern.lower()
        matched = [
            f for f in candidates
            if fnmatch.fnmatchcase(f.path.lower(), pat) or fnmatch.fnmatchcase(posixpath.basename(f.path).lower(), pat)
        ]
        if not matched:
            sample = ", ".join(f.path for f in candidates[:12]) or "none"
            more = f" and {len(candidates) - 12} more" if len(candidates) > 12 else ""
            raise DownloadError(f"--file {pattern!r} matches none of {repo or 'the'} files: {sample}{more}")
        chosen.extend(f for f in matched if f not in chosen)
    if not any(is_projector(f.path) for f in chosen):
        for directory in sorted({posixpath.dirname(f.path) for f in chosen if is_gguf(f.path)}):
            projectors = [f for f in candidates if is_projector(f.path) and posixpath.dirname(f.path) == directory]
            if projectors:
                chosen.append(_preferred_projector(projectors))
    return chosen


def _preferred_projector(projectors: list[RepoFile]) -> RepoFile:
    # f16 is what llama.cpp's own conversions publish first and what most cards load.
    ordered = sorted(projectors, key=lambda f: f.path)
    for marker in ("f16", "bf16", "f32"):
        for f in ordered:
            if re.search(rf"(^|[-_.]){marker}([-_.]|$)", posixpath.basename(f.path).lower()):
                return f
    return ordered[0]


def _same_files(have: Sequence[SourceFile], wanted: Sequence[SourceFile]) -> bool:
    if len(have) != len(wanted):
        return False
    by_path = {f.path: f for f in have}
    for w in wanted:
        h = by_path.get(w.path)
        if h is None or h.size != w.size:
            return False
        if w.sha256:
            if h.sha256 != w.sha256:
                return False
        elif not (w.blob_id and h.blob_id == w.blob_id):
            return False
    return True


class MirrorFetcher:
    """Adds sources to a mirror directory. One per process is enough; it is safe to share."""

    def __init__(self, layout: Layout, fetcher: SafeFetcher, registry: Registry, *, concurrency: int = 4,
                 max_bytes: int = DEFAULT_MAX_BYTES, progress: ProgressFactory | None = None,
                 attempts: int = 5) -> None:
        self.layout = layout
        self.attempts = attempts
        self.fetcher = fetcher
        self.registry = registry
        self.concurrency = concurrency
        self.max_bytes = max_bytes
        self._progress_factory = progress
        self._inflight: dict[str, asyncio.Task[_FileResult]] = {}

    async def add(self, source: str, *, patterns: Sequence[str] = (), name: str | None = None) -> AddResult:
        """`source` is `org/repo[@revision]` or an http(s) URL."""
        if name:
            check_model_name(name)
        if source.startswith(("http://", "https://")):
            if patterns:
                raise DownloadError("--file picks files of a registry repository; a URL is one file")
            return await self.add_url(source, name=name)
        repo, revision = parse_repo(source)
        return await self.add_repo(repo, revision, patterns=patterns, name=name)

    async def add_repo(self, repo: str, revision: str = "main", *, patterns: Sequence[str] = (),
                       name: str | None = None) -> AddResult:
        info = await self.registry.revision(repo, revision)
        selected = select_files(info.files, patterns, repo)
        if not selected:
            raise DownloadError(f"{repo}@{revision}: the repository has no files to fetch")
        model = name or model_name_from(repo)
        wanted = [
            SourceFile(path=check_file_path(f.path), size=f.size, sha256=f.sha256,
                       url=self.registry.file_url(repo, info.commit, f.path), revision=info.commit, blob_id=f.blob_id)
            for f in selected
        ]
        origin = Origin(kind="registry", registry=self.registry.endpoint, repo=repo, revision=info.commit,
                        requested_revision=revision, patterns=list(patterns))
        async with self.layout.model_lock(model):
            sidecar = next((s for s in reversed(self.layout.sidecars(model)) if _same_files(s.files, wanted)), None)
            if sidecar is not None and sidecar.complete and self._all_present(sidecar):
                return AddResult(model, sidecar.version, tuple(sidecar.files), already=True)
            if sidecar is None:
                sidecar = self._start_version(model, origin, wanted)
        return await self._fill(sidecar, self.registry.auth_headers())

    async def add_url(self, url: str, *, name: str | None = None) -> AddResult:
        parsed = check_url(url, allow_private=self.fetcher.allow_private)
        filename = unquote(parsed.path.rsplit("/", 1)[-1])
        if not filename or "/" in filename:
            raise DownloadError(f"{url}: the URL names no file")
        check_file_path(filename)
        model = name or model_name_from(filename)
        origin = Origin(kind="url", url=url)
        async with self.layout.model_lock(model):
            same_url = [s for s in self.layout.sidecars(model) if s.origin.kind == "url" and s.origin.url == url]
            previous = next((s for s in reversed(same_url) if s.complete), None)
            sidecar = next((s for s in reversed(same_url) if not s.complete), None)
            if sidecar is None:
                if previous is not None and previous.files and previous.files[0].etag and self._all_present(previous):
                    if await self._unchanged(url, previous.files[0].etag):
                        return AddResult(model, previous.version, tuple(previous.files), already=True)
                sidecar = self._start_version(model, origin, [SourceFile(path=filename, url=url)])
        result = await self._fill(sidecar, {})
        same = previous is not None and [(f.path, f.sha256) for f in previous.files] == [
            (f.path, f.sha256) for f in result.files]
        if same:
            async with self.layout.model_lock(model):
                # another caller that shared this fetch may have removed it already
                if result.version in self.layout.versions(model):
                    self.layout.remove_version(model, result.version)
            return AddResult(model, previous.version, tuple(previous.files), already=True,
                             unchanged_since=previous.version)
        return result

    # ------------------------------------------------------------ inside

    def _start_version(self, model: str, origin: Origin, files: list[SourceFile]) -> Sidecar:
        version = self.layout.new_version_name(model)
        directory = self.layout.version_dir(model, version)
        directory.mkdir(parents=True)
        sidecar = Sidecar(model=model, version=version, origin=origin, files=files, complete=False,
                          created_at=utc_now())
        self.layout.write_sidecar(sidecar)
        return sidecar

    def _all_present(self, sidecar: Sidecar) -> bool:
        directory = self.layout.version_dir(sidecar.model, sidecar.version)
        return all((directory / f.path).is_file() for f in sidecar.files)

    async def _unchanged(self, url: str, etag: str) -> bool:
        with contextlib.suppress(Exception):
            async with self.fetcher.get(url, {"If-None-Match": etag}) as response:
                return response.status == 304
        return False

    async def _fill(self, sidecar: Sidecar, headers: dict[str, str]) -> AddResult:
        model, version = sidecar.model, sidecar.version
        directory = self.layout.version_dir(model, version)
        progress = self._progress_factory(f"{model}/{version}") if self._progress_factory else None
        for f in sidecar.files:
            if progress:
                progress.expect(f.path, f.size)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(f: SourceFile) -> _FileResult:
            async with limit:
                return await self._fetch_once(model, directory / f.path, f, headers, progress)

        try:
            results = await asyncio.gather(*(one(f) for f in sidecar.files), return_exceptions=True)
        finally:
            if progress:
                progress.close()
        problems = [str(r) for r in results if isinstance(r, BaseException)]
        async with self.layout.model_lock(model):
            current = self.layout.read_sidecar(model, version) or sidecar
            for f, r in zip(sidecar.files, results, strict=True):
                entry = current.file(f.path)
                if entry is None or isinstance(r, BaseException):
                    continue
                entry.size, entry.sha256 = r.size, r.sha256
                entry.etag = r.etag or entry.etag
                if current.origin.kind == "url":
                    entry.revision = entry.etag
            current.complete = not problems and self._all_present(current)
            if current.complete:
                current.fetched_at = utc_now()
            self.layout.write_sidecar(current)
        if problems:
            raise AddFailed(model, version, problems)
        fetched = sum(1 for r in results if isinstance(r, _FileResult) and r.downloaded)
        return AddResult(model, version, tuple(current.files), fetched=fetched, reused=len(results) - fetched)

    async def _fetch_once(self, model: str, dest: Path, f: SourceFile, headers: dict[str, str],
                          progress: Progress | None) -> _FileResult:
        """Single-flight: every caller asking for `dest` awaits the same download."""
        key = str(dest)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._fetch_locked(model, dest, f, headers, progress))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._inflight.pop(key, None) if self._inflight.get(key) is t else None)
        return await asyncio.shield(task)

    async def _fetch_locked(self, model: str, dest: Path, f: SourceFile, headers: dict[str, str],
                            progress: Progress | None) -> _FileResult:
        lock = hidden_sibling(dest, ".lock")
        loop = asyncio.get_running_loop()
        async with file_lock(lock):
            if dest.is_file() and (f.size is None or dest.stat().st_size == f.size):
                sha = f.sha256 or await loop.run_in_executor(None, sha256_file, dest)
                if progress:
                    progress.finish(f.path, "already here")
                return _FileResult(dest.stat().st_size, sha, f.etag, downloaded=False)
            linked = self._link_from_other_version(model, dest, f)
            if linked is not None:
                if progress:
                    progress.finish(f.path, f"linked from version {linked.version}")
                return _FileResult(dest.stat().st_size, f.sha256, linked.file(f.path).etag, downloaded=False)

            def report(done: int, total: int | None) -> None:
                if progress:
                    progress.update(f.path, done, total)

            got: Downloaded = await download_file(
                self.fetcher.get, f.url, dest, size=f.size, sha256=f.sha256, max_bytes=self.max_bytes,
                headers=headers, attempts=self.attempts, progress=report, label=f"{model}: {f.path}",
            )
            if progress:
                progress.finish(f.path, "resumed and checked" if got.resumed else "checked")
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()  # the file is in place: whoever waits finds it there
            return _FileResult(got.size, got.sha256, got.etag, downloaded=True)

    def _link_from_other_version(self, model: str, dest: Path, f: SourceFile) -> Sidecar | None:
        """A file with this sha256 in another version is the same file: hard-link it, fetch nothing."""
        if not f.sha256:
            return None
        for sidecar in reversed(self.layout.sidecars(model)):
            if not sidecar.complete:
                continue
            entry = sidecar.file(f.path)
            source = self.layout.version_dir(model, sidecar.version) / f.path
            if entry is None or entry.sha256 != f.sha256 or source == dest or not source.is_file():
                continue
            if entry.size is not None and source.stat().st_size != entry.size:
                continue
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(source, dest)
            except OSError:
                return None
            return sidecar
        return None
