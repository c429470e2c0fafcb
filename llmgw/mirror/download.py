"""One file over HTTP: resumed, checked, moved into place whole.

The bytes go to `dir/.NAME.partial` (with `dir/.NAME.partial.json` saying
which URL and ETag they came from), are hashed as they are written, and the
partial is renamed to `dir/NAME` only when its size and sha256 are the ones
expected. A dropped connection is resumed with `Range` (and `If-Range`, so a
file that changed upstream starts over instead of being spliced); a file
that turns out wrong is deleted and nothing is moved into place.

Used by the mirror's fetcher and by `client.MirrorClient`; the caller says
how to GET (a `SafeFetcher` for the internet, a plain session for the
mirror) and holds whatever lock keeps two downloads of one file apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import AsyncContextManager, Callable

import aiohttp
import attrs

from llmgw.mirror.layout import hidden_sibling

CHUNK = 1 << 20
GetFn = Callable[[str, dict[str, str]], AsyncContextManager[aiohttp.ClientResponse]]
ProgressFn = Callable[[int, "int | None"], None]  # (bytes so far, expected total)

_RETRYABLE = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, asyncio.TimeoutError, ConnectionError)


class DownloadError(Exception):
    """A download that did not produce the file; says which and why."""


class ChecksumMismatch(DownloadError):
    """The bytes arrived whole but are not the ones expected; nothing was kept."""


class TooLarge(DownloadError):
    """More bytes than expected or allowed; nothing was kept."""


@attrs.frozen
class Downloaded:
    path: Path
    size: int
    sha256: str
    etag: str = ""
    resumed: bool = False


async def download_file(
    get: GetFn,
    url: str,
    dest: Path,
    *,
    size: int | None = None,
    sha256: str = "",
    max_bytes: int | None = None,
    headers: dict[str, str] | None = None,
    attempts: int = 5,
    progress: ProgressFn | None = None,
    label: str | None = None,
) -> Downloaded:
    """Fetch `url` into `dest`, resuming a partial left by an earlier try."""
    label = label or dest.name
    sha256 = sha256.lower()
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = hidden_sibling(dest, ".partial")
    meta_path = hidden_sibling(dest, ".partial.json")
    loop = asyncio.get_running_loop()
    meta = _read_meta(meta_path)
    if meta.get("url") != url:
        meta = {"url": url}  # a partial of something else is not resumed
        _truncate(partial)
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:
        have = _truncate(partial)
    hasher = await loop.run_in_executor(None, _hash_prefix, partial, have)
    resumed = have > 0
    limit = size if size is not None else max_bytes
    last_error: Exception | None = None
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
        request_headers = dict(headers or {})
        if have:
            request_headers["Range"] = f"bytes={have}-"
            if meta.get("etag"):
                request_headers["If-Range"] = meta["etag"]
        try:
            async with get(url, request_headers) as response:
                if have and response.status == 416:
                    if size is not None and have == size:
                        break  # the partial was already whole
                    have = _truncate(partial)  # the partial is longer than the file now is
                    hasher = hashlib.sha256()
                    last_error = DownloadError("the server refused the range of the partial download")
                    continue
                if response.status == 200 and have:
                    have = _truncate(partial)  # the server sent it all again: start over
                    hasher = hashlib.sha256()
                elif response.status == 206 and have:
                    if not _range_starts_at(response, have):
                        raise DownloadError(f"{label}: the server answered a different range than asked")
                elif response.status != 200:
                    raise DownloadError(f"{label}: HTTP {response.status} {response.reason or ''}".rstrip())
                etag = response.headers.get("ETag", "")
                if etag and etag != meta.get("etag"):
                    meta["etag"] = etag
                    _write_meta(meta_path, meta)
                expected_total = _total_from(response, have)
                if limit is not None and expected_total is not None and expected_total > limit:
                    raise TooLarge(f"{label}: the server offers {expected_total} bytes, more than {limit}")
                with open(partial, "ab") as out:
                    async for chunk in response.content.iter_chunked(CHUNK):
                        if limit is not None and have + len(chunk) > limit:
                            raise TooLarge(f"{label}: more than {limit} bytes")
                        await loop.run_in_executor(None, _write_and_hash, out, hasher, chunk)
                        have += len(chunk)
                        if progress:
                            progress(have, size if size is not None else expected_total)
                    await loop.run_in_executor(None, os.fsync, out.fileno())
            last_error = None
            break
        except _RETRYABLE as exc:
            last_error = exc
            have = partial.stat().st_size if partial.exists() else 0
            continue
        except TooLarge:
            _discard(partial, meta_path)
            raise
    if last_error is not None:
        raise DownloadError(f"{label}: gave up after {attempts} tries ({_describe(last_error)}); "
                            "what arrived is kept and the next try resumes it") from last_error
    got = hasher.hexdigest()
    if size is not None and have != size:
        _discard(partial, meta_path)
        raise ChecksumMismatch(f"{label}: {have} bytes arrived, {size} expected; discarded")
    if sha256 and got != sha256:
        _discard(partial, meta_path)
        raise ChecksumMismatch(f"{label}: sha256 {got} is not the expected {sha256}; discarded")
    os.replace(partial, dest)
    with contextlib.suppress(FileNotFoundError):
        meta_path.unlink()
    return Downloaded(path=dest, size=have, sha256=got, etag=meta.get("etag", ""), resumed=resumed)


def sha256_file(path: Path) -> str:
    """The file's sha256; blocking, for an executor."""
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 4):
            hasher.update(chunk)
    return hasher.hexdigest()


def _hash_prefix(path: Path, length: int) -> "hashlib._Hash":
    hasher = hashlib.sha256()
    if length:
        with open(path, "rb") as f:
            left = length
            while left:
                chunk = f.read(min(CHUNK * 4, left))
                if not chunk:
                    break
                hasher.update(chunk)
                left -= len(chunk)
    return hasher


def _write_and_hash(out, hasher, chunk: bytes) -> None:
    out.write(chunk)
    hasher.update(chunk)


def _truncate(path: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        os.truncate(path, 0)
    return 0


def _discard(partial: Path, meta_path: Path) -> None:
    for path in (partial, meta_path):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _range_starts_at(response: aiohttp.ClientResponse, offset: int) -> bool:
    value = response.headers.get("Content-Range", "")
    try:
        unit, _, rest = value.partition(" ")
        return unit == "bytes" and int(rest.split("-", 1)[0]) == offset
    except ValueError:
        return False


def _total_from(response: aiohttp.ClientResponse, have: int) -> int | None:
    if response.status == 206:
        total = response.headers.get("Content-Range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else None
    return response.content_length


def _read_meta(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_meta(path: Path, meta: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
