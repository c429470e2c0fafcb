"""Help: Manual — every page of docs/, as `llmgw docs` has them; contents (T), find (/, n, N)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urwid

from llmgw.console.model.manual import ManualPage, all_pages, page_named
from llmgw.console.views.base import View
from llmgw.console.widgets import Row, Table, TextField
from llmgw.manual import PageNotFound

__all__ = ["ManualView"]


class ManualView(View):
    title = "Manual"

    def build(self) -> urwid.Widget:
        self.pages = all_pages()
        self.list = Table(("page", "title"))
        self.list.set_rows([Row(name, (name, title)) for name, title in self.pages],
                           empty="This llmgw was built without its manual.")
        self.list_caption = urwid.Text(["The manual: every page, as `llmgw docs` lists them",
                                        ("dim", " · Enter reads one")])
        self.list_frame = urwid.Frame(self.list, header=urwid.Pile([self.list_caption, urwid.Divider()]))
        self.page: ManualPage | None = None
        self.walker = urwid.SimpleFocusListWalker([])
        self.lines = urwid.ListBox(self.walker)
        self.page_caption = urwid.Text("")
        self.page_frame = urwid.Frame(self.lines, header=urwid.Pile([urwid.AttrMap(self.page_caption, "title"),
                                                                      urwid.Divider()]))
        self.holder = urwid.WidgetPlaceholder(self.list_frame)
        return self.holder

    def key_contexts(self) -> tuple[str, ...]:
        return ("manual-page",) if self.page is not None else ("manual-list", "panel")

    def commands(self) -> dict[str, Callable[[], None]]:
        self.widget  # noqa: B018 - built on first use
        if self.page is None:
            return {"act": self.open_focused} if self.list.focused is not None else {}
        return {"contents": self.contents, "find": self.find, "find-next": lambda: self.jump(False),
                "find-prev": lambda: self.jump(True), "page-prev": lambda: self.turn(-1),
                "page-next": lambda: self.turn(1), "top": lambda: self.go_to(0),
                "end": lambda: self.go_to(len(self.page.lines) - 1),
                "page-down": lambda: self.lines.keypress(self._size(), "page down")}

    def _size(self) -> tuple[int, int]:
        cols, rows = (self.app.size + (40,))[:2]
        return (max(10, cols - 26), max(3, rows - 5))

    # ---- the list

    def open_focused(self) -> None:
        row = self.list.focused
        if row is not None:
            self.open_page(row.key)

    def open_page(self, name: str) -> None:
        self.widget  # noqa: B018
        try:
            self.page = page_named(name)
        except PageNotFound as exc:
            self.app.show("No such page", [str(exc)])
            return
        self.list.focus_key(self.page.name)
        self._draw()
        self.go_to(0)
        self.holder.original_widget = self.page_frame
        self.app.update_lines()

    def back(self) -> bool:
        if self.page is None:
            return False
        self.page = None
        self.holder.original_widget = self.list_frame
        return True

    # ---- a page

    def _draw(self) -> None:
        page = self.page
        assert page is not None
        headings = {i for i, _, _ in page.headings}
        marked = set(page.matches)
        self.walker[:] = [urwid.AttrMap(urwid.Text(line), "match" if i in marked else
                                        ("heading" if i in headings else None))
                          for i, line in enumerate(page.lines)]
        found = f" · {len(page.matches)} lines hold {page.query!r}" if page.query else ""
        self.page_caption.set_text(f"{page.title} ({page.name}){found}")

    def go_to(self, line: int) -> None:
        if not self.walker:
            return
        line = max(0, min(line, len(self.walker) - 1))
        self.lines.set_focus(line)
        self.lines.set_focus_valign("top")

    @property
    def line(self) -> int:
        return self.lines.focus_position if self.walker else 0

    def turn(self, step: int) -> None:
        names = [name for name, _ in self.pages]
        if self.page is None or self.page.name not in names:
            return
        i = (names.index(self.page.name) + step) % len(names)
        self.open_page(names[i])

    def contents(self) -> None:
        page = self.page
        if page is None:
            return
        if not page.headings:
            self.app.note("This page has no headings.")
            return
        items = [("  " * (level - 1) + text, (lambda at=i: self.go_to(at))) for i, level, text in page.headings]
        self.app.menu(f"Contents of {page.name}", items)

    def find(self) -> None:
        page = self.page
        if page is None:
            return

        def search(values: dict[str, Any]) -> None:
            self.search(values["query"] or "")

        self.app.form("Find", [TextField("query", "Find", page.query, lambda v: v.strip())], search,
                      intro=["Lines holding it are marked; n goes to the next, N to the one before."])

    def search(self, query: str) -> None:
        page = self.page
        assert page is not None
        at = self.line
        matches = page.find(query)
        self._draw()
        if not query:
            self.app.note("")
        elif not matches:
            self.app.note(f"No line holds {query!r}.")
        else:
            self.go_to(page.next_match(at - 1) or 0)
            self.app.note(f"{len(matches)} lines hold {query!r}; n the next, N the one before.")

    def jump(self, backwards: bool) -> None:
        page = self.page
        if page is None:
            return
        if not page.query:
            self.app.note("Nothing to find yet: / asks for it.")
            return
        target = page.next_match(self.line, backwards)
        if target is None:
            self.app.note(f"No line holds {page.query!r}.")
            return
        self.go_to(target)
        self.app.note(f"Line {target + 1} of {len(page.lines)}: match {page.matches.index(target) + 1} "
                      f"of {len(page.matches)}.")
