"""The entries down the left, under their group headings."""

from __future__ import annotations

from collections.abc import Sequence

import urwid

from llmgw.console.widgets.table import SelectableText

__all__ = ["Sidebar"]


class Sidebar(urwid.WidgetWrap):
    """Groups (Watch, People, …) each followed by its entries; only entries take the focus."""

    def __init__(self, groups: Sequence[tuple[str, Sequence[str]]]) -> None:
        items: list[urwid.Widget] = []
        self.positions: list[int] = []  #: the ListBox position of each entry, in order
        self.labels: list[tuple[str, SelectableText]] = []  #: each entry's title and its text
        for group, entries in groups:
            items.append(urwid.AttrMap(urwid.Text(group), "group"))
            for entry in entries:
                self.positions.append(len(items))
                text = SelectableText("  " + entry, wrap="clip")
                self.labels.append((entry, text))
                items.append(urwid.AttrMap(text, "entry", "focus"))
        self.listbox = urwid.ListBox(urwid.SimpleFocusListWalker(items))
        self.listbox.set_focus(self.positions[0])
        super().__init__(self.listbox)

    @property
    def chosen(self) -> int:
        """The index of the entry with the focus."""
        return self.positions.index(self.listbox.focus_position)

    def choose(self, index: int) -> None:
        self.listbox.set_focus(self.positions[index])

    def set_badge(self, index: int, badge: str) -> None:
        """Show a few words after the entry's title (Jobs (2 running)), or none when `badge` is empty."""
        title, text = self.labels[index]
        text.set_text(f"  {title} ({badge})" if badge else "  " + title)
