"""Dialogs over the panel: a message to read, a question only Y answers, a menu of what can be done.

A dialog knows nothing of the app: it is given what to call when it is
answered, and the app closes it first. Each says on the bottom line which
keys do what while it is open (`hints`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import urwid

from llmgw.console.widgets.table import SelectableText

__all__ = ["Confirm", "Dialog", "Menu", "Message"]

#: The most lines a message shows at once; more scroll.
MAX_ROWS = 22
SCROLL_KEYS = ("up", "down", "page up", "page down", "home", "end")


class Dialog(urwid.WidgetWrap):
    hints = ""

    def __init__(self, title: str, rows: Sequence[urwid.Widget], *, attr: str = "dialog") -> None:
        self.pile = urwid.Pile(list(rows))
        box = urwid.LineBox(self.pile, title=title, title_align="left")
        super().__init__(urwid.AttrMap(box, attr))

    def selectable(self) -> bool:
        return True  # a dialog takes every key, even one with nothing in it to choose


def _lines(lines: Sequence[str | tuple[str, str]], max_rows: int, *, at_end: bool = False) -> urwid.Widget:
    texts = [urwid.Text(line) for line in lines] or [urwid.Text("")]
    if len(texts) <= max_rows:
        return urwid.Pile(texts)
    box = urwid.ListBox(urwid.SimpleFocusListWalker(texts))
    if at_end:  # a log: the newest line, at the bottom, is what is read first
        box.set_focus(len(texts) - 1)
        box.set_focus_valign("bottom")
    return urwid.BoxAdapter(box, max_rows)


class Message(Dialog):
    """Lines to read: a result, a refusal, a node's details. Enter, Esc or ← closes it."""

    hints = "Enter/Esc close  ↑↓ PgUp/PgDn scroll"

    def __init__(self, title: str, lines: Sequence[str | tuple[str, str]], on_close: Callable[[], None], *,
                 attr: str = "dialog", max_rows: int = MAX_ROWS, at_end: bool = False) -> None:
        self.on_close = on_close
        self.max_rows, self.at_end = max_rows, at_end
        self.lines = list(lines)
        self.body = _lines(lines, max_rows, at_end=at_end)
        super().__init__(title, [self.body, urwid.Divider(), urwid.AttrMap(urwid.Text("Enter closes"), "dim")],
                         attr=attr)

    def set_lines(self, lines: Sequence[str | tuple[str, str]]) -> None:
        """Show `lines` instead (a job read again); a long one is shown from its newest line when `at_end`."""
        if list(lines) == self.lines:
            return
        self.lines = list(lines)
        self.body = _lines(lines, self.max_rows, at_end=self.at_end)
        self.pile.contents[0] = (self.body, self.pile.options())

    def keypress(self, size, key: str) -> str | None:
        if key in ("enter", "esc", "left"):
            self.on_close()
        elif key in SCROLL_KEYS:
            return super().keypress(size, key)
        return None


class Confirm(Dialog):
    """A question about something that cannot be undone: only Y goes on; any other key is no."""

    hints = "Y yes, go on  any other key: no"

    def __init__(self, question: Sequence[str], on_yes: Callable[[], None], on_no: Callable[[], None]) -> None:
        self.on_yes = on_yes
        self.on_no = on_no
        rows = [urwid.Text(line) for line in question]
        rows += [urwid.Divider(), urwid.AttrMap(urwid.Text("Y goes on; any other key leaves it as it is."), "dim")]
        super().__init__("Are you sure?", rows, attr="warning")

    def keypress(self, size, key: str) -> str | None:
        if key in ("y", "Y"):
            self.on_yes()
        elif key != "ctrl c":
            self.on_no()
        return None if key != "ctrl c" else key


class Menu(Dialog):
    """What can be done to a row: Enter (or →) does the one chosen; Esc or ← closes."""

    hints = "↑↓ choose  Enter do it  ←/Esc back"

    def __init__(self, title: str, items: Sequence[str], on_choose: Callable[[int], None],
                 on_close: Callable[[], None], *, note: str = "") -> None:
        self.items = list(items)
        self.on_choose = on_choose
        self.on_close = on_close
        entries = [urwid.AttrMap(SelectableText(f" {label} "), None, "focus") for label in items]
        self.listbox = urwid.ListBox(urwid.SimpleFocusListWalker(entries))
        rows: list[urwid.Widget] = [urwid.BoxAdapter(self.listbox, max(1, min(len(entries), MAX_ROWS)))]
        if note:
            rows += [urwid.Divider(), urwid.AttrMap(urwid.Text(note), "dim")]
        super().__init__(title, rows)

    def keypress(self, size, key: str) -> str | None:
        if key in ("enter", "right"):
            self.on_choose(self.listbox.focus_position)
        elif key in ("esc", "left"):
            self.on_close()
        elif key in SCROLL_KEYS:
            return super().keypress(size, key)
        return None
