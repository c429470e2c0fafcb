"""A model's files on this node: fetched once, checked, shared, removed when asked.

A `source` is one of:

- a local path (`/models/x.gguf`, `file:///models/x.gguf`): used where it is,
  never copied; checked when a sha256 is given;
- an http(s) URL: downloaded into `WEIGHTS/http/<hash of the URL>/<name>`,
  resumed after a broken connection, checked, moved into place whole;
- the mirror: `mirror:MODEL[/VERSION[/PATH]]`, a bare `MODEL/VERSION/PATH`,
  or a URL under the configured mirror: fetched with the mirror client into
  `WEIGHTS/mirror/MODEL/VERSION/`, every file held to a checksum.

Concurrent `ensure()` calls for one source share one fetch (single
flight), and each caller hears its progress. What the node holds is listed
in `WEIGHTS/.llmgw-weights.json`, for the agent's Register.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import shutil
import time
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import unquote, urlsplit

import aiohttp
import attrs

from llmgw.mirror.client import MirrorClient, MirrorError, MirrorRef
from llmgw.mirror.download import ChecksumMismatch, DownloadError, download_file, sha256_file
from llmgw.mirror.layout import file_lock, hidden_sibling
from llmgw.wire.messages import WeightsPresent, WeightsProgress

__all__ = ["WeightsFetcher", "WeightsError", "WeightsInUse", "WeightsEntry", "classify_source", "manifest_sha256"]

log = logging.getLogger("llmgw.agent.weights")

INDEX_NAME = ".llmgw-weights.json"
ProgressFn = Callable[[WeightsProgress], None]


class WeightsError(Exception):
    """The weights could not be had; the message says which and why."""


class WeightsInUse(WeightsError):
    """Removal refused: a shard that is not over runs on them."""


@attrs.frozen
class WeightsEntry:
    """One source this node holds."""

    source: str
    path: str  #: a file, or a directory for a whole mirror version
    kind: str  #: "path", "http" or "mirror"
    model: str = ""
    sha256: str = ""  #: what it was checked against; empty when it was not
    size_bytes: int = 0
    fetched_at: float = 0.0

    def to_wire(self) -> WeightsPresent:
        return WeightsPresent(model=self.model, source=self.source, sha256=self.sha256, size_bytes=self.size_bytes,
                              path=self.path)


def classify_source(source: str, mirror_url: str = "") -> tuple[str, str]:
    """(kind, what) for a source: ("path", /abs/path), ("http", url) or ("mirror", model/version/path)."""
    text = source.strip()
    if not text:
        raise WeightsError("the model has no weights source")
    if text.startswith("file://"):
        return "path", unquote(urlsplit(text).path)
    if text.startswith("/"):
        return "path", text
    if text.startswith("mirror:"):
        return "mirror", text[len("mirror:"):].lstrip("/")
    if text.startswith(("http://", "https://")):
        base = mirror_url.rstrip("/")
        if base and (text == base or text.startswith(base + "/")):
            return "mirror", unquote(text[len(base):]).lstrip("/")
        return "http", text
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise WeightsError(f"source {source!r}: an agent does not fetch {scheme}:// sources; fetch it into the "
                           "mirror (llmgw mirror add) and name it as mirror:MODEL/VERSION/FILE")
    return "mirror", text


def manifest_sha256(files: Mapping[str, str]) -> str:
    """The checksum of a directory: sha256 of `<sha256>  <path>\\n` lines sorted by path (sha256sum's format)."""
    body = "".join(f"{sha}  {path}\n" for path, sha in sorted(files.items()))
    return hashlib.sha256(body.encode()).hexdigest()


class WeightsFetcher:
    """Fetches and keeps model weights under `weights_dir`; one per agent."""

    def __init__(self, weights_dir: str | os.PathLike[str], *, mirror_url: str = "",
                 session: aiohttp.ClientSession | None = None, attempts: int = 5,
                 progress_interval: float = 1.0) -> None:
        self.dir = Path(weights_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mirror_url = mirror_url.rstrip("/")
        self.offline = ""  #: why nothing may be fetched from outside (the control plane's mirror.offline); "" when it may
        self.attempts = attempts
        self.progress_interval = progress_interval
        self._session = session
        self._own_session = session is None
        self._mirror: MirrorClient | None = None
        self._flights: dict[str, _Flight] = {}
        self._index_lock = asyncio.Lock()
        self._stamps: dict[str, tuple[int, int]] = {}  # local files already checked: (size, mtime) when they were

    async def use_mirror(self, url: str) -> None:
        """Fetch from the mirror at `url` from now on (the one the control plane names)."""
        url = url.rstrip("/")
        if url == self.mirror_url:
            return
        old, self._mirror, self.mirror_url = self._mirror, None, url
        if old is not None:
            await old.close()

    async def close(self) -> None:
        if self._mirror is not None:
            await self._mirror.close()
            self._mirror = None
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ reading

    def present(self) -> list[WeightsEntry]:
        """What this node holds, as far as the files are still there."""
        return [e for e in self._read_index().values() if Path(e.path).exists()]

    # ------------------------------------------------------------------ fetching

    async def ensure(self, source: str, *, sha256: str = "", size: int = 0, model: str = "",
                     progress: ProgressFn | None = None) -> Path:
        """The local path of `source`'s files, fetched first if this node does not hold them yet."""
        kind, what = classify_source(source, self.mirror_url)
        if kind == "http" and self.offline:
            raise WeightsError(f"{source}: outside the mirror, and {self.offline}; bring the model in an offline "
                               "bundle and name it mirror:MODEL/VERSION/FILE")
        sha256 = sha256.strip().lower()
        key = f"{kind}:{what}:{sha256}"
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight(model=model, source=source, interval=self.progress_interval)
            flight.task = asyncio.ensure_future(self._fetch(flight, kind, what, sha256, size, model))
            self._flights[key] = flight
            flight.task.add_done_callback(lambda t: self._flights.pop(key, None)
                                          if self._flights.get(key) is flight else None)
        if progress is not None:
            flight.watchers.append(progress)
        try:
            return await asyncio.shield(flight.task)
        finally:
            if progress is not None and progress in flight.watchers:
                flight.watchers.remove(progress)

    async def _fetch(self, flight: _Flight, kind: str, what: str, sha256: str, size: int, model: str) -> Path:
        try:
            if kind == "path":
                path = await self._local(flight, what, sha256)
            elif kind == "http":
                path = await self._http(flight, what, sha256, size)
            else:
                path = await self._from_mirror(flight, what, sha256)
        except WeightsError as exc:
            flight.report("failed", message=str(exc), force=True)
            raise
        except (ChecksumMismatch, DownloadError, MirrorError, aiohttp.ClientError, OSError, ValueError) as exc:
            text = str(exc) or type(exc).__name__
            flight.report("failed", message=text, force=True)
            raise WeightsError(f"{flight.source}: {text}") from exc
        total = _size_of(path)
        if not model:
            known = self._read_index().get(flight.source)
            model = known.model if known else ""
        await self._remember(WeightsEntry(source=flight.source, path=str(path), kind=kind, model=model, sha256=sha256,
                                          size_bytes=total, fetched_at=time.time()))
        flight.report("ready", done=total, total=total, force=True)
        return path

    async def _local(self, flight: _Flight, path_text: str, sha256: str) -> Path:
        path = Path(path_text)
        if not path.exists():
            raise WeightsError(f"{path}: no such file or directory on this node")
        if sha256:
            known = self._read_index().get(flight.source)
            stamp = _stamp(path)
            if not (known and known.sha256 == sha256 and self._stamps.get(str(path)) == stamp):
                flight.report("verifying", total=_size_of(path), force=True)
                got = await asyncio.get_running_loop().run_in_executor(None, _checksum_of, path)
                if got != sha256:
                    raise WeightsError(f"{path}: sha256 {got} is not the expected {sha256}; refused")
                self._stamps[str(path)] = stamp
        return path

    async def _http(self, flight: _Flight, url: str, sha256: str, size: int) -> Path:
        name = posixpath.basename(unquote(urlsplit(url).path)) or "model"
        if name.startswith("."):
            name = "model" + name
        dest = self.dir / "http" / hashlib.sha256(url.encode()).hexdigest()[:16] / name
        async with file_lock(hidden_sibling(dest, ".lock")):
            if dest.is_file():
                known = self._read_index().get(flight.source)
                if not sha256 or (known is not None and known.sha256 == sha256):
                    return dest
                flight.report("verifying", total=dest.stat().st_size, force=True)
                got = await asyncio.get_running_loop().run_in_executor(None, sha256_file, dest)
                if got == sha256:
                    return dest
                dest.unlink()  # not the file wanted now: fetch it again
            flight.report("fetching", total=size, force=True)
            await download_file(self._get, url, dest, size=size or None, sha256=sha256, attempts=self.attempts,
                                progress=lambda done, total: flight.report("fetching", done=done, total=total or 0),
                                label=url)
        return dest

    async def _from_mirror(self, flight: _Flight, what: str, sha256: str) -> Path:
        if not self.mirror_url:
            raise WeightsError(f"source {flight.source!r} is on the mirror, but this node has no mirror configured "
                               "(agent.yaml: mirror)")
        try:
            ref = MirrorRef.parse(what)
        except MirrorError as exc:
            raise WeightsError(str(exc)) from None
        client = self._mirror_client()
        version = await client.index(ref.model, ref.version)
        if not version.complete:
            raise WeightsError(f"{ref.model}/{version.version} is still being fetched into the mirror; try again later")
        dest = self.dir / "mirror" / ref.model / version.version
        expected: dict[str, str] | None = None
        if ref.path:
            if sha256:
                expected = {ref.path: sha256}
            wanted = [f for f in version.files if f.path == ref.path]
        else:
            wanted = list(version.files)
            if sha256:
                listed = manifest_sha256({f.path: f.sha256 for f in version.files})
                if listed != sha256:
                    raise WeightsError(f"{ref.model}/{version.version}: the mirror's files hash to manifest "
                                       f"{listed}, {sha256} was expected; refused")
        total = sum(f.size or 0 for f in wanted)
        done: dict[str, int] = {}

        def on_file(path: str, got: int, _size: int | None) -> None:
            done[path] = got
            flight.report("fetching", done=sum(done.values()), total=total)

        flight.report("fetching", total=total, force=True)
        await client.fetch(MirrorRef(ref.model, version.version, ref.path), dest, expected=expected,
                           progress=on_file)
        return dest / ref.path if ref.path else dest

    # ------------------------------------------------------------------ removing

    async def remove(self, *, model: str = "", source: str = "", sha256: str = "",
                     in_use: Mapping[str, str] | None = None) -> list[str]:
        """Delete the files of every entry matching; returns the paths removed.

        `in_use` maps paths to the shard running on them: an entry one of
        them is under is refused (WeightsInUse). A local path is dropped from
        the list but never deleted: it is not the agent's.
        """
        if not (model or source):
            raise WeightsError("say which weights to remove: a model or a source")
        async with self._index_lock:
            index = self._read_index()
            chosen = [e for e in index.values()
                      if (not source or e.source == source) and (not model or e.model == model or e.source == source)
                      and (not sha256 or e.sha256 == sha256.lower())]
            for entry in chosen:
                for used, shard in (in_use or {}).items():
                    if _under(Path(used), Path(entry.path)) or _under(Path(entry.path), Path(used)):
                        raise WeightsInUse(f"{entry.source} is in use by shard {shard}; stop it first")
            removed = []
            for entry in chosen:
                index.pop(entry.source, None)
                if entry.kind == "path":
                    continue
                target = Path(entry.path)
                if entry.kind == "http":
                    target = target.parent  # its own directory, the partial and lock files with it
                await asyncio.get_running_loop().run_in_executor(None, _delete, target)
                removed.append(str(target))
            self._write_index(index)
        return removed

    # ------------------------------------------------------------------ the index

    def _read_index(self) -> dict[str, WeightsEntry]:
        try:
            data = json.loads((self.dir / INDEX_NAME).read_text())
        except (OSError, ValueError):
            return {}
        out = {}
        for item in data.get("weights", []) if isinstance(data, dict) else []:
            with contextlib.suppress(TypeError):
                entry = WeightsEntry(**item)
                out[entry.source] = entry
        return out

    def _write_index(self, index: Mapping[str, WeightsEntry]) -> None:
        from llmgw.agent.supervisor import write_atomic

        body = json.dumps({"weights": [attrs.asdict(e) for e in index.values()]}, indent=1)
        write_atomic(self.dir / INDEX_NAME, body.encode())

    async def _remember(self, entry: WeightsEntry) -> None:
        async with self._index_lock:
            index = self._read_index()
            index[entry.source] = entry
            self._write_index(index)

    # ------------------------------------------------------------------ HTTP

    def _http_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=15, sock_read=60), trust_env=True)
        return self._session

    def _mirror_client(self) -> MirrorClient:
        if self._mirror is None:
            self._mirror = MirrorClient(self.mirror_url, attempts=self.attempts)
        return self._mirror

    @contextlib.asynccontextmanager
    async def _get(self, url: str, headers: dict[str, str]) -> AsyncIterator[aiohttp.ClientResponse]:
        async with self._http_session().get(url, headers=headers) as response:
            yield response


class _Flight:
    """One fetch in progress and everyone waiting on it."""

    def __init__(self, *, model: str, source: str, interval: float) -> None:
        self.model = model
        self.source = source
        self.interval = interval
        self.watchers: list[ProgressFn] = []
        self.task: asyncio.Future[Path] | None = None
        self._last = 0.0

    def report(self, state: str, *, done: int = 0, total: int = 0, message: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        msg = WeightsProgress(model=self.model, source=self.source, done_bytes=done, total_bytes=total, state=state,
                              message=message)
        for watcher in list(self.watchers):
            try:
                watcher(msg)
            except Exception:  # a listener's bug must not stop the download
                log.exception("a weights progress listener failed")


def _size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns)


def _checksum_of(path: Path) -> str:
    if path.is_file():
        return sha256_file(path)
    files = {str(p.relative_to(path)): sha256_file(p) for p in sorted(path.rglob("*"))
             if p.is_file() and not p.name.startswith(".")}
    return manifest_sha256(files)


def _under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def _delete(target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()


def entries_to_wire(entries: Iterable[WeightsEntry]) -> tuple[WeightsPresent, ...]:
    return tuple(e.to_wire() for e in entries)
