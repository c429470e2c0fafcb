"""The mirror's Python package index: a PEP 503 simple index over the files in its `wheels/` folder.

An operator puts wheels (and sdists, as llama.cpp's build needs
`llama-cpp-python`'s) in `MIRROR/wheels/`, and the mirror's file server
answers:

- `GET /simple/`: each project those files belong to, by its normalized
  name (`vllm`, `llama-cpp-python`);
- `GET /simple/<project>/`: each of its files, linked to `/wheels/<file>`
  with its `#sha256=` (hashed once per file size and time, then kept).

Agents install engines from it when agent.yaml names no `engine_index_url`
and they know the mirror (agent.yaml's `mirror`, or the one the control
plane names in its Welcome): pip or uv with `--index-url MIRROR/simple/`.
Nothing but these two pages is added; the wheels themselves are files the
file server already serves.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import re
from pathlib import Path

from aiohttp import web

from llmgw.mirror.layout import WHEELS

__all__ = ["FOLDER", "add_wheel_index", "project_of", "normalized"]

FOLDER = WHEELS
_SUFFIXES = (".whl", ".tar.gz", ".zip")
HASHES = web.AppKey("wheel_hashes", dict)
ROOT = web.AppKey("wheel_root", Path)


def normalized(name: str) -> str:
    """A project's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str | None:
    """The normalized project a distribution file belongs to, or None for a file that is none."""
    if filename.startswith(".") or not filename.endswith(_SUFFIXES):
        return None
    if filename.endswith(".whl"):
        name = filename.split("-", 1)[0]
    else:
        stem = filename[: -len(".tar.gz")] if filename.endswith(".tar.gz") else filename[: -len(".zip")]
        name, sep, _ = stem.rpartition("-")
        if not sep:
            return None
    return normalized(name) if name else None


def add_wheel_index(app: web.Application, root: Path) -> None:
    """Serve /simple/ and /simple/<project>/ over `root/wheels/` (before the app's catch-all route)."""
    app[ROOT] = root
    app[HASHES] = {}
    app.router.add_get("/simple", _projects)
    app.router.add_get("/simple/", _projects)
    app.router.add_get("/simple/{project}", _project)
    app.router.add_get("/simple/{project}/", _project)


def _files(request: web.Request) -> list[Path]:
    folder = request.app[ROOT] / FOLDER
    try:
        return sorted(p for p in folder.iterdir() if p.is_file() and project_of(p.name))
    except OSError:
        return []


def _page(title: str, links: list[str]) -> web.Response:
    body = "\n".join(links)
    return web.Response(text=f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
                             f"<title>{html.escape(title)}</title></head><body>\n{body}\n</body></html>\n",
                        content_type="text/html")


async def _projects(request: web.Request) -> web.Response:
    names = sorted({project_of(p.name) for p in _files(request)} - {None})
    return _page("Simple index", [f'<a href="{n}/">{n}</a><br>' for n in names])


async def _project(request: web.Request) -> web.Response:
    want = normalized(request.match_info["project"])
    if request.match_info["project"] != want:
        raise web.HTTPMovedPermanently(f"/simple/{want}/")
    files = [p for p in _files(request) if project_of(p.name) == want]
    if not files:
        raise web.HTTPNotFound(text=f"the mirror's wheels/ folder holds no {want}")
    links = []
    for path in files:
        digest = await _sha256(request.app, path)
        links.append(f'<a href="/{FOLDER}/{html.escape(path.name)}#sha256={digest}">{html.escape(path.name)}</a><br>')
    return _page(f"Links for {want}", links)


async def _sha256(app: web.Application, path: Path) -> str:
    stat = path.stat()
    key = (path.name, stat.st_size, stat.st_mtime_ns)
    hashes: dict = app[HASHES]
    if key not in hashes:
        def digest() -> str:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            return h.hexdigest()
        hashes[key] = await asyncio.get_running_loop().run_in_executor(None, digest)
    return hashes[key]
