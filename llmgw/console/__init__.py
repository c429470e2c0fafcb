"""`llmgw console`: the operator's terminal screen over the admin API (urwid, on the asyncio loop).

The shape, by folder:

- `model/`: what the screen shows, read from the admin API by `AdminApi`
  (aiohttp; address and token found the way `llmgw ctl` finds them) into
  `ConsoleModel`, re-read every few seconds without blocking; the changes an
  operator makes are `Actions`; the settings tree and the manual's pages are
  plain data too.
- `widgets/`: generic pieces: a table whose ListWalker is a thin adapter over
  rows, the sidebar, and the dialogs (message, question, menu, form).
- `views/`: one thin class per entry of the sidebar, turning the model's data
  into rows and offering what can be done to a row.
- `commands.py`: keys to named commands, per context; the bottom line is
  written from the same table.
- `app.py`: the layout, the dialog stack, the dispatch of commands and the
  loop that re-reads what is watched.

Tests build `ConsoleApp` against a live admin API, press keys and render the
screen to a canvas; docs/console.md is the operator's page.
"""

from __future__ import annotations

__all__ = ["ConsoleApp"]


def __getattr__(name: str):  # the app pulls in urwid; importing the package should not
    if name in __all__:
        from llmgw.console import app

        return getattr(app, name)
    raise AttributeError(name)
