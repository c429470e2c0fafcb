"""A manual page as the console reads it: lines, headings, and finding text in them.

The pages are `llmgw.manual.pages()`, the same index `llmgw docs` lists.
A page is shown as its own Markdown lines; headings are the lines that
start with `#` outside a code block.
"""

from __future__ import annotations

import attrs

from llmgw.manual import Page, find, pages

__all__ = ["ManualPage", "all_pages", "page_named"]


@attrs.define
class ManualPage:
    name: str
    title: str
    lines: list[str]
    headings: list[tuple[int, int, str]]  #: (line index, level, text)
    query: str = ""
    matches: list[int] = attrs.Factory(list)  #: indexes of the lines holding the query

    @classmethod
    def of(cls, page: Page) -> ManualPage:
        lines = page.text.splitlines() or [""]
        headings = []
        fenced = False
        for i, line in enumerate(lines):
            if line.startswith(("```", "~~~")):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                marks = len(line) - len(line.lstrip("#"))
                if line[marks:marks + 1] == " ":
                    headings.append((i, marks, line[marks:].strip()))
        return cls(name=page.name, title=page.title, lines=lines, headings=headings)

    def find(self, query: str) -> list[int]:
        """Mark the lines holding `query` (any case); an empty query clears the marks."""
        self.query = query
        needle = query.lower()
        self.matches = [i for i, line in enumerate(self.lines) if needle and needle in line.lower()] if needle else []
        return self.matches

    def next_match(self, after: int, backwards: bool = False) -> int | None:
        """The first match after line `after` (before it, backwards), going round; None without matches."""
        if not self.matches:
            return None
        if backwards:
            before = [i for i in self.matches if i < after]
            return before[-1] if before else self.matches[-1]
        later = [i for i in self.matches if i > after]
        return later[0] if later else self.matches[0]


def all_pages() -> list[tuple[str, str]]:
    """(name, title) of every page, the index first."""
    return [(p.name, p.title) for p in pages().values()]


def page_named(name: str) -> ManualPage:
    """PageNotFound (a LookupError naming the closest) when there is none."""
    return ManualPage.of(find(name))
