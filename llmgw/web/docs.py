"""The manual as web pages, for /docs: markdown-it-py, heading anchors, a contents list.

Raw HTML in a page is shown as text, never passed through, so no page can
carry a script; markdown-it itself refuses `javascript:` and `data:` links.
Links between pages (`clients.md#tools`) become `/docs/clients#tools`.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import attrs
from markdown_it import MarkdownIt
from markupsafe import Markup

from llmgw import manual

_MD_LINK = re.compile(r"^(?:\./)?([A-Za-z0-9_.-]+)\.md(#[A-Za-z0-9_-]*)?$")


@attrs.frozen
class Heading:
    level: int
    text: str
    anchor: str


@attrs.frozen
class RenderedPage:
    name: str
    title: str
    html: Markup
    headings: tuple[Heading, ...]  # h2 and h3, for the contents list


def slug(text: str) -> str:
    """A heading's anchor: lower case, letters and digits, words joined by '-'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return re.sub(r"[\s_-]+", "-", text).strip("-") or "section"


def _renderer() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def _plain(inline) -> str:
    return "".join(child.content for child in (inline.children or []) if child.type in ("text", "code_inline"))


@functools.cache
def render(name: str) -> RenderedPage:
    """One page of the manual, rendered (cached: the manual does not change while running)."""
    page = manual.find(name)
    md = _renderer()
    tokens = md.parse(page.text)
    seen: dict[str, int] = {}
    headings: list[Heading] = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            text = _plain(tokens[i + 1])
            anchor = slug(text)
            if anchor in seen:
                seen[anchor] += 1
                anchor = f"{anchor}-{seen[anchor]}"
            else:
                seen[anchor] = 0
            token.attrSet("id", anchor)
            level = int(token.tag[1])
            if level in (2, 3):
                headings.append(Heading(level, text, anchor))
        if token.type == "inline":
            for child in token.children or []:
                if child.type == "link_open":
                    href = str(child.attrGet("href") or "")
                    m = _MD_LINK.match(href)
                    if m:
                        child.attrSet("href", f"/docs/{m.group(1).lower()}{m.group(2) or ''}")
                    elif href.startswith(("http://", "https://")):
                        child.attrSet("rel", "noopener noreferrer")
    html = md.renderer.render(tokens, md.options, {})
    return RenderedPage(page.name, page.title, Markup(html), tuple(headings))


def contents() -> list[manual.Page]:
    """Every page, the index first."""
    return list(manual.pages().values())
