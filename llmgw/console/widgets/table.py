"""A table of rows: column headings over a ListBox whose walker is a thin adapter over the rows.

The rows are plain data (`Row`: a key and its cells) handed in by a view;
the walker makes a widget for a row when the ListBox asks for it, and keeps
the focus on the same key when the rows are replaced by a newer read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import urwid

__all__ = ["IndexWalker", "Row", "RowsWalker", "SelectableText", "Table"]

#: The widest a column grows to before its cells are cut short.
MAX_COLUMN = 40


@attrs.frozen
class Row:
    key: Any  #: what the row stands for: a node's id, a model's name
    cells: tuple[str, ...]
    attr: str | None = None  #: a palette entry for the whole row (an error, a heading)


class SelectableText(urwid.Text):
    """A line that can hold the focus (a row, a sidebar entry); it handles no key itself."""

    _selectable = True

    def keypress(self, size: tuple[int], key: str) -> str:
        return key


class IndexWalker(urwid.ListWalker):
    """A ListWalker over a list held elsewhere: positions are indexes, and a widget is made for an item
    (`make`) only when the ListBox shows it, then kept until the items change (`forget`)."""

    def __init__(self) -> None:
        self.focus = 0
        self._cache: dict[int, urwid.Widget] = {}

    def __len__(self) -> int:
        raise NotImplementedError

    def make(self, pos: int) -> urwid.Widget:
        raise NotImplementedError

    def forget(self) -> None:
        """The items changed: widgets are made again, and the focus stays within them."""
        self._cache.clear()
        self.focus = min(self.focus, max(0, len(self) - 1))

    def _widget(self, pos: int) -> urwid.Widget:
        if pos not in self._cache:
            self._cache[pos] = self.make(pos)
        return self._cache[pos]

    def get_focus(self):
        if not len(self):
            return None, None
        self.focus = min(self.focus, len(self) - 1)  # the items shrank under a ListBox that kept its place
        return self._widget(self.focus), self.focus

    def set_focus(self, position: int) -> None:
        self.focus = max(0, min(position, len(self) - 1))  # urwid 4 (Python 3.10's) may ask past the end
        self._modified()

    def get_next(self, position: int):
        if position + 1 >= len(self):
            return None, None
        return self._widget(position + 1), position + 1

    def get_prev(self, position: int):
        if position <= 0:
            return None, None
        return self._widget(position - 1), position - 1


class RowsWalker(IndexWalker):
    """The walker over `rows`; the focus stays on the same key when the rows are replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.widths: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def set_rows(self, rows: Sequence[Row], widths: list[int]) -> None:
        key = self.rows[self.focus].key if 0 <= self.focus < len(self.rows) else None
        self.rows = list(rows)
        self.widths = widths
        self.forget()
        keys = [r.key for r in self.rows]
        if key in keys:
            self.focus = keys.index(key)
        self._modified()

    def make(self, pos: int) -> urwid.Widget:
        row = self.rows[pos]
        line = format_cells(row.cells, self.widths)
        return urwid.AttrMap(SelectableText(line, wrap="clip"), row.attr, "focus")


def format_cells(cells: Sequence[str], widths: Sequence[int]) -> str:
    parts = []
    for i, cell in enumerate(cells):
        text = str(cell)
        if i < len(widths) and i < len(cells) - 1:
            if len(text) > widths[i]:
                text = text[: max(1, widths[i] - 1)] + "…"
            text = text.ljust(widths[i])
        parts.append(text)
    return "  ".join(parts).rstrip()


class Table(urwid.WidgetWrap):
    """Headings, then the rows; a sentence in their place when there are none (or they could not be read)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = tuple(columns)
        self.walker = RowsWalker()
        self.listbox = urwid.ListBox(self.walker)
        self.heading = urwid.Text("", wrap="clip")
        self.empty = urwid.Text("")
        self._body = urwid.WidgetPlaceholder(self.listbox)
        super().__init__(urwid.Frame(self._body, header=urwid.AttrMap(self.heading, "heading")))

    def set_rows(self, rows: Sequence[Row], *, empty: str = "(none)") -> None:
        widths = [len(c) for c in self.columns]
        for row in rows:
            for i, cell in enumerate(row.cells[: len(widths)]):
                widths[i] = min(MAX_COLUMN, max(widths[i], len(str(cell))))
        self.heading.set_text(format_cells([c.upper() for c in self.columns], widths))
        self.walker.set_rows(rows, widths)
        if rows:
            self._body.original_widget = self.listbox
        else:
            self.empty.set_text(empty)
            self._body.original_widget = urwid.Filler(self.empty, valign="top")

    @property
    def focused(self) -> Row | None:
        w = self.walker
        return w.rows[w.focus] if 0 <= w.focus < len(w.rows) else None

    def focus_key(self, key: Any) -> bool:
        for i, row in enumerate(self.walker.rows):
            if row.key == key:
                self.listbox.set_focus(i)
                return True
        return False

    def selectable(self) -> bool:
        return True
