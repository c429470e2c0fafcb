"""The console against a live admin API (LiveAdmin, a FakeCluster of two GPU nodes and one model).

Tests press keys as an operator would (`app.press`), wait for the calls
those keys started (`await app.settle()`), and read the screen as text
rendered to a canvas (`screen(app)`).
"""

from __future__ import annotations

import pytest

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi

QWEN = {"name": "qwen-small", "owner": "team:acme/ml", "profiles": [{"engine": "sim", "gpus": 1}],
        "scaling": {"min": 1, "max": 2}}
SIZE = (120, 40)


@pytest.fixture
def live(tmp_path):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")], models=[QWEN])
    with LiveAdmin(tmp_path, cluster=cluster) as server:
        yield server


@pytest.fixture
async def app(live):
    console = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-test")
    await console.model.refresh_now()
    await console.settle()
    console.update_lines()
    yield console
    await console.settle()
    await console.api.close()


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
