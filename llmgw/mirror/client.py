"""Reading from a mirror: what an agent's weights fetcher calls.

    async with MirrorClient("http://models.internal:8081") as mirror:
        version = await mirror.index("qwen3-4b")             # newest whole version
        files = await mirror.fetch("qwen3-4b/2025-06-01/qwen3-4b-q4_k_m.gguf", dest,
                                   expected={"qwen3-4b-q4_k_m.gguf": sha_from_control_plane})

A version's index (`GET /<model>/<version>/`) lists each file's path, size
and sha256. `fetch` downloads into `dest/<path>` through `dest/.<name>.partial`,
resuming a partial left by an earlier try, and moves a file into place only
when its size and sha256 are right. The checksums to hold a file to are
the caller's `expected` ones when given (the control plane's, learned from
the sidecar through the API) and the index's otherwise; `require_expected`
refuses any file the caller has no checksum for, so nothing a node runs is
taken on the mirror's word alone. URLs are built from the client's own base
and the index's paths are checked, so an index cannot send the client
elsewhere or write outside `dest`.

Several tasks asking for one file share one download, and a lock file
beside it keeps two processes apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import posixpath
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import quote, unquote, urlsplit

import aiohttp
import attrs

from llmgw.mirror.download import ChecksumMismatch, DownloadError, download_file, sha256_file
from llmgw.mirror.layout import (
    LayoutError,
    check_file_path,
    check_model_name,
    file_lock,
    hidden_sibling,
    is_version_name,
)

__all__ = [
    "MirrorClient", "MirrorError", "IncompleteVersion", "ChecksumMismatch", "MirrorFile", "MirrorVersion",
    "MirrorRef", "FetchedFile",
]

FileProgress = Callable[[str, int, "int | None"], None]  # (path, bytes so far, size)


class MirrorError(Exception):
    """The mirror could not give what was asked, or gave something not to be trusted."""


class IncompleteVersion(MirrorError):
    """The version is still being downloaded into the mirror."""


@attrs.frozen
class MirrorFile:
    path: str
    size: int | None
    sha256: str
    present: bool = True
    blob_id: str = ""  # the registry's git blob id, for comparing files it gives no sha256 for


@attrs.frozen
class MirrorVersion:
    model: str
    version: str
    complete: bool
    files: tuple[MirrorFile, ...]
    fetched_at: str = ""
    origin: Mapping[str, object] = attrs.field(factory=dict, eq=False)

    def file(self, path: str) -> MirrorFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)


@attrs.frozen
class MirrorRef:
    """`model`, `model/version` or `model/version/path`: what a source on the mirror names."""

    model: str
    version: str | None = None
    path: str | None = None

    @classmethod
    def parse(cls, source: str) -> MirrorRef:
        """From `model[/version[/path]]` or a mirror URL `http://host:8081/model/version/path`."""
        text = source
        if text.startswith(("http://", "https://")):
            text = unquote(urlsplit(text).path)
        parts = [p for p in text.split("/") if p]
        if not parts:
            raise MirrorError(f"{source!r} names no model on the mirror")
        try:
            check_model_name(parts[0])
            if len(parts) >= 2 and not is_version_name(parts[1]):
                raise LayoutError(f"{parts[1]!r} is not a version (like 2025-06-01)")
            path = check_file_path("/".join(parts[2:])) if len(parts) > 2 else None
        except LayoutError as exc:
            raise MirrorError(f"{source!r}: {exc}") from None
        return cls(parts[0], parts[1] if len(parts) >= 2 else None, path)

    def __str__(self) -> str:
        return "/".join(p for p in (self.model, self.version, self.path) if p)


@attrs.frozen
class FetchedFile:
    path: Path
    size: int
    sha256: str
    downloaded: bool  # False: it was already in `dest`


def is_projector(path: str) -> bool:
    name = posixpath.basename(path).lower()
    return name.endswith(".gguf") and "mmproj" in name


class MirrorClient:
    """A mirror's file server, read over plain HTTP with every file checked."""

    def __init__(self, base_url: str, *, session: aiohttp.ClientSession | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0, attempts: int = 5) -> None:
        self.base_url = base_url.rstrip("/")
        self.attempts = attempts
        self._own_session = session is None
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self._inflight: dict[str, asyncio.Task[FetchedFile]] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, trust_env=False)
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> MirrorClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ reading indexes

    async def models(self) -> list[str]:
        data = await self._json("/")
        return [str(m.get("name")) for m in data.get("models", []) if isinstance(m, dict)]

    async def versions(self, model: str) -> list[dict]:
        """Every version of `model`, oldest first: version, complete, size, fetched_at."""
        data = await self._json(f"/{quote(check_model_name(model))}/")
        return [v for v in data.get("versions", []) if isinstance(v, dict)]

    async def newest(self, model: str) -> str:
        whole = [v["version"] for v in await self.versions(model) if v.get("complete")]
        if not whole:
            raise MirrorError(f"{model}: the mirror has no whole version of it")
        return whole[-1]

    async def index(self, model: str, version: str | None = None) -> MirrorVersion:
        """A version's files with sizes and sha256 (the newest whole version when `version` is None)."""
        version = version or await self.newest(model)
        data = await self._json(f"/{quote(check_model_name(model))}/{version}/")
        files = []
        for entry in data.get("files", []):
            try:
                path = check_file_path(str(entry.get("path", "")))
            except LayoutError as exc:
                raise MirrorError(f"{model}/{version}: the index lists a path the client refuses ({exc})") from None
            size = entry.get("size")
            files.append(MirrorFile(path=path, size=size if isinstance(size, int) else None,
                                    sha256=str(entry.get("sha256") or "").lower(),
                                    present=bool(entry.get("present", True)),
                                    blob_id=str(entry.get("blob_id") or "")))
        return MirrorVersion(model=model, version=version, complete=bool(data.get("complete")), files=tuple(files),
                             fetched_at=str(data.get("fetched_at") or ""), origin=data.get("origin") or {})

    def file_url(self, model: str, version: str, path: str) -> str:
        return f"{self.base_url}/{quote(model)}/{version}/{quote(path)}"

    # ------------------------------------------------------------ fetching

    async def fetch(self, source: str | MirrorRef, dest: str | Path, *, expected: Mapping[str, str] | None = None,
                    require_expected: bool = False, only: Iterable[str] = (), verify_existing: bool = False,
                    progress: FileProgress | None = None) -> list[FetchedFile]:
        """Download what `source` names into `dest`: a file (with its projector beside it) or a whole version.

        `expected` maps a file's path to the sha256 it must have; `only` keeps
        the files matching these patterns; `verify_existing` re-hashes files
        already in `dest` instead of trusting their size.
        """
        ref = source if isinstance(source, MirrorRef) else MirrorRef.parse(source)
        version = await self.index(ref.model, ref.version)
        if not version.complete:
            raise IncompleteVersion(f"{ref.model}/{version.version} is still being fetched into the mirror")
        files = list(version.files)
        if ref.path:
            chosen = version.file(ref.path)
            if chosen is None:
                raise MirrorError(f"{ref}: the version has no such file")
            files = [chosen]
            if chosen.path.lower().endswith(".gguf") and not is_projector(chosen.path):
                directory = posixpath.dirname(chosen.path)
                files += [f for f in version.files if is_projector(f.path) and posixpath.dirname(f.path) == directory]
        patterns = [p.lower() for p in only]
        if patterns:
            files = [f for f in files if any(fnmatch.fnmatchcase(f.path.lower(), p) for p in patterns)]
        expected = {k: v.lower() for k, v in (expected or {}).items()}
        plan = []
        for f in files:
            sha = expected.get(f.path) or ""
            if not sha and require_expected:
                raise MirrorError(f"{ref.model}/{version.version}/{f.path}: no checksum given for it; refused")
            if sha and f.sha256 and sha != f.sha256:
                raise ChecksumMismatch(f"{ref.model}/{version.version}/{f.path}: the mirror lists sha256 {f.sha256}, "
                                       f"{sha} was expected; refused")
            plan.append((f, sha or f.sha256))
        return list(await asyncio.gather(*(
            self.fetch_file(ref.model, version.version, f, Path(dest), sha256=sha, verify_existing=verify_existing,
                            progress=progress)
            for f, sha in plan)))

    async def fetch_file(self, model: str, version: str, file: MirrorFile, dest: Path, *, sha256: str = "",
                         verify_existing: bool = False, progress: FileProgress | None = None) -> FetchedFile:
        """One file into `dest/<file.path>`, checked; shared with any other task asking for it."""
        sha256 = (sha256 or file.sha256).lower()
        if not sha256:
            raise MirrorError(f"{model}/{version}/{file.path}: no sha256 to check it against; refused")
        target = Path(dest) / file.path
        key = str(target.absolute())
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._fetch_locked(model, version, file, target, sha256, verify_existing,
                                                            progress))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._inflight.pop(key, None) if self._inflight.get(key) is t else None)
        return await asyncio.shield(task)

    async def _fetch_locked(self, model: str, version: str, file: MirrorFile, target: Path, sha256: str,
                            verify_existing: bool, progress: FileProgress | None) -> FetchedFile:
        loop = asyncio.get_running_loop()
        lock = hidden_sibling(target, ".lock")
        async with file_lock(lock):
            if target.is_file() and (file.size is None or target.stat().st_size == file.size):
                if not verify_existing:
                    return FetchedFile(target, target.stat().st_size, sha256, downloaded=False)
                if await loop.run_in_executor(None, sha256_file, target) == sha256:
                    return FetchedFile(target, target.stat().st_size, sha256, downloaded=False)
                target.unlink()  # damaged on this disk: fetch it again

            def report(done: int, total: int | None) -> None:
                if progress:
                    progress(file.path, done, total)

            try:
                got = await download_file(self._get, self.file_url(model, version, file.path), target,
                                          size=file.size, sha256=sha256, attempts=self.attempts, progress=report,
                                          label=f"{model}/{version}/{file.path}")
            except ChecksumMismatch:
                raise
            except DownloadError as exc:
                raise MirrorError(str(exc)) from exc
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        return FetchedFile(got.path, got.size, got.sha256, downloaded=True)

    @contextlib.asynccontextmanager
    async def _get(self, url: str, headers: dict[str, str]) -> AsyncIterator[aiohttp.ClientResponse]:
        async with self.session.get(url, headers=headers, allow_redirects=False) as response:
            yield response

    async def _json(self, path: str) -> dict:
        url = self.base_url + path
        try:
            async with self.session.get(url, allow_redirects=False) as response:
                if response.status == 404:
                    raise MirrorError(f"{url}: not on the mirror")
                if response.status != 200:
                    raise MirrorError(f"{url}: HTTP {response.status}")
                data = await response.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise MirrorError(f"{url}: {exc}") from exc
        if not isinstance(data, dict):
            raise MirrorError(f"{url}: not an index")
        return data
