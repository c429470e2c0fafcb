"""Keys to named commands, by context; the bottom line is written from the same table.

A context is where the keyboard is: the sidebar, the panel, or a view of its
own inside the panel (the manual's page, Usage, Settings). A key is looked up
in the contexts from the narrowest out; the first binding wins. Keys no
binding names (↑ ↓, PgUp, PgDn) go to the widget with the focus, which
scrolls or moves; their bindings have no command and are there to be shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

__all__ = ["KEYMAP", "Binding", "hints", "resolve"]


@attrs.frozen
class Binding:
    keys: tuple[str, ...]  #: urwid's names of the keys
    command: str | None  #: the named command; None for keys the focused widget handles itself
    label: str = ""  #: the key as the bottom line shows it; empty hides the binding there
    says: str = ""  #: what it does, in a word or three


def _b(keys: str, command: str | None, label: str = "", says: str = "") -> Binding:
    return Binding(tuple(keys.split("|")) if keys else (), command, label, says)


KEYMAP: dict[str, tuple[Binding, ...]] = {
    "global": (
        _b("A|a", "add", "A", "add"),
        _b("?", "help", "?", "help"),
        _b("q|Q", "leave", "Q", "leave"),
        _b("ctrl c", "leave-now"),
    ),
    "sidebar": (
        _b("", None, "↑↓", "choose"),
        _b("right|enter", "open", "→/Enter", "open"),
    ),
    "panel": (
        _b("", None, "↑↓", "row"),
        _b("enter|right", "act", "Enter", "what can be done"),
        _b("left|esc", "back", "←/Esc", "back"),
        _b("", None, "PgUp/PgDn", "scroll"),
    ),
    "text": (  # a panel of lines with nothing to choose
        _b("", None, "↑↓ PgUp/PgDn", "scroll"),
        _b("left|esc", "back", "←/Esc", "back"),
    ),
    "do": (
        _b("enter|right", "act", "Enter", "do it"),
    ),
    "usage": (
        _b("right", "regroup", "→", "group by the next"),
        _b("E|e", "export", "E", "export CSV"),
    ),
    "manual-list": (
        _b("enter|right", "act", "Enter", "read"),
    ),
    "manual-page": (
        _b("", None, "↑↓ PgUp/PgDn Space", "scroll"),
        _b(" ", "page-down"),
        _b("g|home", "top", "g/G", "top/end"),
        _b("G|end", "end"),
        _b("T|t", "contents", "T", "contents"),
        _b("/", "find", "/", "find"),
        _b("n", "find-next", "n/N", "next/before"),
        _b("N", "find-prev"),
        _b("[", "page-prev", "[ ]", "page before/after"),
        _b("]", "page-next"),
        _b("left|esc", "back", "←", "the list"),
        _b("enter|right", None),
    ),
    "settings": (
        _b("enter|right", "act", "Enter", "change or open"),
        _b("U|u", "unset", "U", "back to default"),
        _b("D|d", "remove", "D", "remove entry"),
        _b("S|s", "save", "S", "save server.yaml"),
    ),
    "logs-list": (
        _b("enter|right", "act", "Enter", "its agent's log"),
    ),
    "logs": (  # one node's log, newest at the bottom
        _b("", None, "↑↓ PgUp/PgDn", "scroll"),
        _b("g|home", "top", "g/G", "oldest/newest"),
        _b("G|end", "end"),
        _b("R|r", "reread", "R", "read again"),
        _b("left|esc", "back", "←/Esc", "the nodes"),
    ),
}


def resolve(contexts: Iterable[str], key: str) -> tuple[bool, str | None]:
    """(found, command) for `key` in `contexts`, narrowest first; found without a command leaves the key alone."""
    for context in contexts:
        for binding in KEYMAP.get(context, ()):
            if key in binding.keys:
                return True, binding.command
    return False, None


def hints(contexts: Iterable[str], available: Callable[[str], bool]) -> str:
    """The bottom line: each shown binding of `contexts` whose command can run now, once per key."""
    shown: list[str] = []
    taken: set[str] = set()
    for context in contexts:
        for binding in KEYMAP.get(context, ()):
            keys = set(binding.keys) or {binding.label}
            if keys & taken:
                continue
            taken |= keys
            if binding.label and (binding.command is None or available(binding.command)):
                shown.append(f"{binding.label} {binding.says}")
    return "  ".join(shown)
