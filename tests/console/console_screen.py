"""Driving the console as an operator would, in tests.

Press keys (`keys`, `type_in`, `choose`), wait for the calls those keys
started (`await app.settle()`), and read the screen as the text of a
canvas rendered at 120x40 (`screen(app)`).
"""

from __future__ import annotations

from llmgw.console.app import ConsoleApp

SIZE = (120, 40)


def screen(app: ConsoleApp, size: tuple[int, int] = SIZE) -> str:
    """What the operator sees, as text."""
    app.update_lines()
    return "\n".join(line.decode("utf-8").rstrip() for line in app.widget.render(size, focus=True).text)


async def open_view(app: ConsoleApp, title: str):
    view = app.open_view(title)
    await app.model.refresh_now(*view.watches)
    await app.settle()
    view.refresh()
    return view


async def keys(app: ConsoleApp, *pressed: str) -> None:
    """Press keys, letting what each starts finish before the next."""
    for key in pressed:
        app.press(key)
        await app.settle()


async def type_in(app: ConsoleApp, text: str, *, clear: bool = True) -> None:
    """Type into the field with the focus, first emptying it."""
    if clear:
        form = app.dialogs[-1]
        app.press("end", *["backspace"] * len(form.fields[form.stop].edit.edit_text))
    app.press(*text)
    await app.settle()


async def choose(app: ConsoleApp, label: str) -> None:
    """In the open menu, go down to the item starting with `label` and press Enter."""
    menu = app.dialogs[-1]
    labels = list(menu.items)
    index = next(i for i, item in enumerate(labels) if item.startswith(label))
    await keys(app, *["down"] * index, "enter")


async def row(app: ConsoleApp, key) -> None:
    """Put the focus on the row whose key is `key`."""
    assert app.view.table.focus_key(key), key


def attr_of(app: ConsoleApp, words: str, size: tuple[int, int] = SIZE) -> object:
    """The palette entry the screen draws `words` with (the first row holding them); inside a dialog, the
    line's own (the innermost of the layers urwid stacks over the dialog's)."""
    app.update_lines()
    for row in app.widget.render(size, focus=True).content():
        for attr, _, text in row:
            if words.encode() in text:
                return attr.layers[0] if hasattr(attr, "layers") else attr
    raise AssertionError(f"{words!r} is not on the screen:\n{screen(app, size)}")
