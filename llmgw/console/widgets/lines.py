"""Lines to scroll through, each with its own colour, that can follow the end as new ones come (a log).

`Lines` is a ListBox over `LinesWalker`, a thin adapter over a list of
(palette entry, text) pairs: a widget is made for a line only when the
ListBox shows it. When the lines are replaced by a newer read, a box that was
at the end stays at the end (the newest line at the bottom); one scrolled
back keeps its place.
"""

from __future__ import annotations

from collections.abc import Sequence

import urwid

from llmgw.console.widgets.table import IndexWalker

__all__ = ["Lines", "LinesWalker"]

Line = tuple["str | None", str]  #: (palette entry or None, text)


class LinesWalker(IndexWalker):
    """The walker over `lines`."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[Line] = []

    def __len__(self) -> int:
        return len(self.lines)

    def set_lines(self, lines: Sequence[Line]) -> None:
        self.lines = list(lines)
        self.forget()
        self._modified()

    def make(self, pos: int) -> urwid.Widget:
        attr, text = self.lines[pos]
        return urwid.Text((attr, text) if attr else text)


class Lines(urwid.ListBox):
    """A ListBox of coloured lines that stays at the end while it is there."""

    def __init__(self) -> None:
        self.walker = LinesWalker()
        super().__init__(self.walker)

    @property
    def at_end(self) -> bool:
        return not self.walker.lines or self.walker.focus >= len(self.walker.lines) - 1

    def set_lines(self, lines: Sequence[Line], *, follow: bool | None = None) -> None:
        """Show `lines`; at the end afterwards when `follow`, or (None) when it was at the end before."""
        if lines == self.walker.lines:
            return
        follow = self.at_end if follow is None else follow
        self.walker.set_lines(lines)
        if follow:
            self.go_to_end()

    def go_to_end(self) -> None:
        if self.walker.lines:
            self.set_focus(len(self.walker.lines) - 1)
            self.set_focus_valign("bottom")

    def go_to_start(self) -> None:
        if self.walker.lines:
            self.set_focus(0)
            self.set_focus_valign("top")

    def selectable(self) -> bool:
        return True
