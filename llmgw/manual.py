"""The manual: every page of docs/, built into the zipapp.

A source checkout reads the repository's docs/; a built zipapp reads the
copy `build.py` packs into `llmgw/_docs/`. The console and the portal use
the same index.
"""

from __future__ import annotations

import difflib
import functools
from importlib import resources
from pathlib import Path

import attrs

_SOURCE_DOCS = Path(__file__).resolve().parent.parent / "docs"


@attrs.frozen
class Page:
    name: str  #: the file name without .md, e.g. "gateway"
    title: str  #: the page's first heading
    text: str


def _read_all() -> dict[str, str]:
    packed = resources.files("llmgw").joinpath("_docs")
    if packed.is_dir():
        return {p.name[:-3]: p.read_text(encoding="utf-8") for p in packed.iterdir() if p.name.endswith(".md")}
    if _SOURCE_DOCS.is_dir():
        return {p.stem: p.read_text(encoding="utf-8") for p in _SOURCE_DOCS.glob("*.md")}
    return {}


def _title(name: str, text: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name


@functools.cache
def pages() -> dict[str, Page]:
    """Every page by name, the index first, then alphabetically."""
    raw = _read_all()
    order = sorted(raw, key=lambda n: (n != "index", n))
    return {n: Page(name=n, title=_title(n, raw[n]), text=raw[n]) for n in order}


class PageNotFound(LookupError):
    pass


def find(name: str) -> Page:
    """A page by name (with or without .md, any case); a near miss names the closest."""
    all_pages = pages()
    key = name.lower().removesuffix(".md").removeprefix("docs/")
    if key in all_pages:
        return all_pages[key]
    close = difflib.get_close_matches(key, list(all_pages), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `llmgw docs` lists the pages"
    raise PageNotFound(f"no page named {name!r}{hint}")
