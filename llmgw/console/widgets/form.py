"""A form: fields filled with what is set now, checked before anything is sent.

Tab or ↓ goes to the next field, ↑ to the one before, ← → changes a choice,
Enter on Apply sends (Enter on the only field of a form of one). Each field
reads its text with a parser that raises ValueError saying what is wrong;
a form-wide check then sees the values together (a maximum below the
minimum). Any mistake is written in the form, under its field, and nothing
is sent. While the change is under way the form says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import urwid

from llmgw.config.units import ByteSize, Duration
from llmgw.console.widgets.dialogs import Dialog
from llmgw.console.widgets.table import SelectableText

__all__ = ["ChoiceField", "FieldError", "Form", "TextField", "duration", "size", "text", "whole"]

Parser = Callable[[str], Any]


class FieldError(ValueError):
    """A mistake in one field found only when the values are taken together: said under `field`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# ---------------------------------------------------------------- parsers


def text(what: str, *, required: bool = False) -> Parser:
    def parse(value: str) -> str | None:
        value = value.strip()
        if not value:
            if required:
                raise ValueError(f"{what}: give a value")
            return None
        return value

    return parse


def whole(what: str, *, minimum: int = 0, blank: bool = False) -> Parser:
    """A whole number of at least `minimum`; blank gives None when `blank` allows it."""

    def parse(value: str) -> int | None:
        value = value.strip()
        if not value and blank:
            return None
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{what}: expected a whole number, got {value!r}") from None
        if number < minimum:
            raise ValueError(f"{what}: {number} is less than {minimum}")
        return number

    return parse


def duration(what: str, *, blank: bool = False) -> Parser:
    def parse(value: str) -> str | None:
        value = value.strip()
        if not value and blank:
            return None
        try:
            return str(Duration.parse(value))
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None

    return parse


def size(what: str, *, blank: bool = True) -> Parser:
    def parse(value: str) -> str | None:
        value = value.strip()
        if not value and blank:
            return None
        try:
            ByteSize.parse(value)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        return value

    return parse


# ---------------------------------------------------------------- fields


class TextField:
    def __init__(self, name: str, label: str, value: Any = "", parse: Parser | None = None, *,
                 hint: str = "") -> None:
        self.name = name
        self.label = label
        self.parse = parse or text(label)
        self.hint = hint
        self.edit = urwid.Edit("", "" if value is None else str(value))
        self.editor: urwid.Widget = urwid.AttrMap(self.edit, "field", "field-focus")

    def value(self) -> Any:
        return self.parse(self.edit.edit_text)

    def keypress(self, key: str) -> bool:
        return False  # the Edit itself takes the key

    def set_text(self, value: str) -> None:
        self.edit.set_edit_text(value)


class ChoiceField:
    """One of a few values; ← → go through them."""

    def __init__(self, name: str, label: str, choices: Sequence[str], value: Any = None, *, hint: str = "",
                 values: Sequence[Any] | None = None) -> None:
        self.name = name
        self.label = label
        self.choices = list(choices)
        self.values = list(values) if values is not None else list(choices)
        self.hint = hint
        self.index = self.values.index(value) if value in self.values else 0
        self.shown = SelectableText("")
        self.editor = urwid.AttrMap(self.shown, "field", "field-focus")
        self._show()

    def _show(self) -> None:
        self.shown.set_text(f"◀ {self.choices[self.index]} ▶")

    def value(self) -> Any:
        return self.values[self.index]

    def keypress(self, key: str) -> bool:
        if key in ("left", "right", " "):
            self.index = (self.index + (-1 if key == "left" else 1)) % len(self.choices)
            self._show()
            return True
        return False


Field = TextField | ChoiceField


class Note(urwid.WidgetWrap):
    """A line said in the form (a mistake, "sending…") that takes no room while there is nothing to say."""

    def __init__(self, attr: str = "error") -> None:
        self.text = urwid.Text("")
        self._attr = attr
        self._holder = urwid.WidgetPlaceholder(urwid.Pile([]))
        super().__init__(self._holder)

    def set_text(self, text: str) -> None:
        self.text.set_text(text)
        self._holder.original_widget = urwid.AttrMap(self.text, self._attr) if text else urwid.Pile([])

    @property
    def said(self) -> str:
        return self.text.text


class Form(Dialog):
    hints = "Tab/↓ next  ↑ before  ←→ choose  Enter on Apply sends  Esc cancel"

    def __init__(self, title: str, fields: Sequence[Field], on_apply: Callable[[dict[str, Any]], None],
                 on_close: Callable[[], None], *, check: Callable[[dict[str, Any]], list[str]] | None = None,
                 intro: Sequence[str] = (), apply_label: str = "Apply") -> None:
        self.fields = list(fields)
        self.on_apply = on_apply
        self.on_close = on_close
        self.check = check
        width = max(len(f.label) for f in self.fields) + 2
        rows: list[urwid.Widget] = [urwid.Text(line) for line in intro]
        if intro:
            rows.append(urwid.Divider())
        self.errors: dict[str, Note] = {}
        self._field_rows: list[int] = []
        for f in self.fields:
            self._field_rows.append(len(rows))
            rows.append(urwid.Columns([(width, urwid.Text(f.label)), f.editor]))
            self.errors[f.name] = Note()
            rows.append(self.errors[f.name])
            if f.hint:
                rows.append(urwid.Padding(urwid.AttrMap(urwid.Text(f.hint), "dim"), left=width))
        self.problem = Note()
        rows += [urwid.Divider(), self.problem]
        self.apply_button = urwid.AttrMap(SelectableText(f"[ {apply_label} ]"), "button", "focus")
        self.cancel_button = urwid.AttrMap(SelectableText("[ Cancel ]"), "button", "focus")
        self.buttons = urwid.Columns([("pack", self.apply_button), ("pack", self.cancel_button)], dividechars=2)
        self._button_row = len(rows)
        rows.append(self.buttons)
        super().__init__(title, rows)
        self._stops = [*self._field_rows, self._button_row, self._button_row]  # fields, Apply, Cancel
        self.stop = 0
        self._focus()
        self.sending = False

    # ---- moving about

    def _focus(self) -> None:
        self.pile.focus_position = self._stops[self.stop]
        if self.stop >= len(self.fields):
            self.buttons.focus_position = self.stop - len(self.fields)

    def move(self, step: int) -> None:
        self.stop = (self.stop + step) % len(self._stops)
        self._focus()

    def keypress(self, size, key: str) -> str | None:
        if key == "ctrl c":
            return key
        if self.sending:
            return None
        if key == "esc":
            self.on_close()
        elif key in ("tab", "down"):
            self.move(1)
        elif key in ("shift tab", "up"):
            self.move(-1)
        elif key == "enter":
            if self.stop == len(self.fields) + 1:
                self.on_close()
            elif self.stop == len(self.fields) or len(self.fields) == 1:
                self.submit()
            else:
                self.move(1)
        elif self.stop < len(self.fields):
            if not self.fields[self.stop].keypress(key):
                super().keypress(size, key)
        elif key in ("left", "right"):
            self.move(-1 if key == "left" else 1)
        return None

    # ---- sending

    def values(self) -> dict[str, Any] | None:
        """Every field's value, or None after writing each mistake in the form."""
        values: dict[str, Any] = {}
        bad = False
        for f in self.fields:
            try:
                values[f.name] = f.value()
                self.errors[f.name].set_text("")
            except ValueError as exc:
                self.errors[f.name].set_text(str(exc))
                bad = True
        self.problem.set_text("")
        if bad:
            return None
        problems = self.check(values) if self.check else []
        if problems:
            self.problem.set_text("\n".join(problems))
            return None
        return values

    def submit(self) -> None:
        values = self.values()
        if values is not None:
            self.on_apply(values)

    def set_sending(self, sending: bool) -> None:
        self.sending = sending
        self.problem.set_text("sending…" if sending else "")

    def say(self, problem: str) -> None:
        self.problem.set_text(problem)
