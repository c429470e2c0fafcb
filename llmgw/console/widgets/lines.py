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

__all__ = ["Lines", "LinesWalker"]

Line = tuple["str | None", str]  #: (palette entry or None, text)


class LinesWalker(urwid.ListWalker):
    """The ListWalker over `lines`, nothing more: positions are indexes."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.focus = 0
        self._cache: dict[int, urwid.Widget] = {}

    def set_lines(self, lines: Sequence[Line]) -> None:
        self.lines = list(lines)
        self._cache.clear()
        self.focus = min(self.focus, max(0, len(self.lines) - 1))
        self._modified()

    def _widget(self, pos: int) -> urwid.Widget:
        if pos not in self._cache:
            attr, text = self.lines[pos]
            self._cache[pos] = urwid.Text((attr, text) if attr else text)
        return self._cache[pos]

    def get_focus(self):
        if not self.lines:
            return None, None
        return self._widget(self.focus), self.focus

    def set_focus(self, position: int) -> None:
        self.focus = position
        self._modified()

    def get_next(self, position: int):
        if position + 1 >= len(self.lines):
            return None, None
        return self._widget(position + 1), position + 1

    def get_prev(self, position: int):
        if position <= 0:
            return None, None
        return self._widget(position - 1), position - 1


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
