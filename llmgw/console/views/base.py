"""What every view is: a title in the sidebar, the resources it watches, a widget, named commands.

A view holds no data of its own beyond what is on screen: `refresh()` turns
the model's last read into rows or lines, and is called whenever a resource
it watches has been read again. What can be done to a row is a list of
(label, function) pairs; the app shows them as a menu.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import urwid

from llmgw.console.widgets import Row, Table
from llmgw.compat import fromisoformat

if TYPE_CHECKING:
    from llmgw.console.app import ConsoleApp

__all__ = ["Action", "TableView", "TextView", "View", "ago", "counts", "gib", "money", "when"]

Action = tuple[str, Callable[[], None]]


class View:
    title: ClassVar[str] = ""
    #: The resources read again every few seconds while this view is chosen.
    watches: ClassVar[tuple[str, ...]] = ()
    #: Those of `watches` without which there is nothing to show (all of them when None).
    needs: ClassVar[tuple[str, ...] | None] = None
    #: The keymap contexts while the panel has the focus, narrowest first.
    contexts: ClassVar[tuple[str, ...]] = ("panel",)
    #: The resources `badge()` reads: read every few seconds whichever view is chosen.
    badge_watches: ClassVar[tuple[str, ...]] = ()

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app
        self.model = app.model
        self.actions = app.actions
        self._widget: urwid.Widget | None = None

    @property
    def widget(self) -> urwid.Widget:
        if self._widget is None:
            self._widget = self.build()
            self.refresh()
        return self._widget

    def build(self) -> urwid.Widget:
        raise NotImplementedError

    def refresh(self) -> None:
        """Show the model's last read."""

    def commands(self) -> dict[str, Callable[[], None]]:
        """The named commands this view can run now."""
        return {}

    def key_contexts(self) -> tuple[str, ...]:
        return self.contexts

    def back(self) -> bool:
        """← inside the view (a page back to its list); False leaves the panel."""
        return False

    def badge(self) -> str:
        """A few words after the view's entry in the sidebar (how many jobs run); empty for none."""
        return ""

    def unread(self) -> str | None:
        """A sentence for the panel when a watched resource has never been read: why, or that it is coming."""
        for name in self.watches if self.needs is None else self.needs:
            w = self.model[name]
            if w.data is None:
                return f"Could not read {name}: {w.error}" if w.error else f"Reading {name}…"
        return None


class TextView(View):
    """Lines to read and scroll."""

    contexts = ("text",)

    def build(self) -> urwid.Widget:
        self.walker = urwid.SimpleFocusListWalker([])
        return urwid.ListBox(self.walker)

    def lines(self) -> list[Any]:
        raise NotImplementedError

    def refresh(self) -> None:
        if self._widget is None:
            return
        missing = self.unread()
        lines = [("error" if missing.startswith("Could") else "dim", missing)] if missing else self.lines()
        self.walker[:] = [urwid.Text(line) for line in lines]


class TableView(View):
    """A caption, then a table of rows; Enter on a row offers what can be done to it."""

    columns: ClassVar[tuple[str, ...]] = ()

    def build(self) -> urwid.Widget:
        self.caption = urwid.Text("")
        self.table = Table(self.columns)
        return urwid.Frame(self.table, header=urwid.Pile([self.caption, urwid.Divider()]))

    def rows(self) -> list[Row]:
        raise NotImplementedError

    def caption_text(self) -> Any:
        return self.title

    def row_actions(self, row: Row) -> list[Action]:
        return []

    def row_title(self, row: Row) -> str:
        return str(row.key)

    def add(self) -> None:
        raise NotImplementedError

    def refresh(self) -> None:
        if self._widget is None:
            return
        missing = self.unread()
        if missing:
            self.table.set_rows([], empty=missing)
        else:
            self.table.set_rows(self.rows())
        self.caption.set_text(self.caption_text())

    def commands(self) -> dict[str, Callable[[], None]]:
        found: dict[str, Callable[[], None]] = {}
        if self._widget is not None and self.table.focused is not None and self.row_actions(self.table.focused):
            found["act"] = self.act
        if type(self).add is not TableView.add:
            found["add"] = self.add
        return found

    def act(self) -> None:
        row = self.table.focused
        if row is not None:
            self.app.menu(self.row_title(row), self.row_actions(row))

    def focused_key(self) -> Any:
        row = self.table.focused if self._widget is not None else None
        return None if row is None else row.key


# ---------------------------------------------------------------- how things are written


def gib(n: int | None) -> str:
    return f"{(n or 0) / 2**30:.0f}GiB"


def counts(by_state: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(by_state.items())) or "none"


def money(micros: int, currency: str = "") -> str:
    from llmgw.accounting.prices import format_money

    return format_money(micros, currency)


def _time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        t = fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def when(value: str | None) -> str:
    """An API time as the operator reads it: 2026-09-01 14:03 (UTC)."""
    t = _time(value)
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M") if t else "-"


def ago(value: str | None, now: dt.datetime | None = None) -> str:
    t = _time(value)
    if t is None:
        return "never"
    seconds = max(0, ((now or dt.datetime.now(dt.UTC)) - t).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"
