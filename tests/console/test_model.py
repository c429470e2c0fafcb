"""The model under the views: reads that never block the screen, failures said on the status line,
the address and token found as ctl finds them, and bare `llmgw` opening the console."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from console_screen import keys, open_view, screen

from llmgw.admin.testing import free_port
from llmgw.cli import main as cli_main
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi, AdminError, admin_token_found


def status(app) -> str:
    return screen(app).splitlines()[-2].strip()


async def test_a_failing_api_keeps_what_was_read_and_says_why(tmp_path):
    from llmgw.admin.testing import FakeCluster, LiveAdmin

    with LiveAdmin(tmp_path, cluster=FakeCluster()) as live:
        app = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp")
        await open_view(app, "Nodes")
        assert "gpu-a-01  ready" in screen(app)
    # The control plane has gone away.
    try:
        now = app.model.clock()
        app.model.clock = lambda: now + 12
        await app.model.refresh_now("nodes", "summary")
        text = screen(app)
        assert "gpu-a-01  ready" in text  # still shown
        line = screen(app, (200, 40)).splitlines()[-2].strip()
        assert line == (f"showing what was read 12s ago · nodes: cannot reach the admin API at {live.url} "
                        "(Connection refused); is llmgw server running there? (--admin or $LLMGW_ADMIN_URL)")
        await keys(app, "left", "down")  # the screen still answers
        assert app.view.title == "GPUs"
    finally:
        await app.api.close()


async def test_an_api_never_reached_says_so_in_the_panel():
    app = ConsoleApp(AdminApi(f"http://127.0.0.1:{free_port()}", "token", "ann"), machine="cp")
    try:
        await app.model.refresh_now()
        text = screen(app)
        assert "Could not read summary: cannot reach the admin API" in text
        assert "summary: cannot reach the admin API" in status(app)
        await open_view(app, "Models")
        assert "Could not read models: cannot reach" in screen(app)
    finally:
        await app.api.close()


class SlowApi(AdminApi):
    """Answers everything but /models, which never answers until released."""

    def __init__(self, inner: AdminApi) -> None:
        super().__init__(inner.url, inner.token, inner.actor)
        self.release = asyncio.Event()

    async def get(self, path: str, **query):
        if path == "/models":
            await self.release.wait()
        return await super().get(path, **query)


async def test_a_slow_api_never_blocks_the_screen(live):
    api = SlowApi(AdminApi(live.url, live.TOKEN, "ann"))
    app = ConsoleApp(api, machine="cp")
    try:
        t = [0.0]
        app.model.clock = lambda: t[0]
        app.open_view("Models")  # starts reading models, which hangs
        assert app.model["models"].reading
        assert "Reading models…" in screen(app)
        t[0] = 5.0
        assert status(app) == "reading models… (5s, the admin API is slow)"
        app.press("left", "up")  # keys are handled while the read waits
        assert app.view.title == "GPUs"
        app.press("down")
        assert app.model["models"].reading and len(app.model.refresh(["models"])) == 1  # not asked twice
        api.release.set()
        await app.settle()
        assert "qwen-small  ready" in screen(app) and status(app) == ""
    finally:
        api.release.set()
        await app.settle()
        await api.close()


async def test_the_watch_loop_reads_again_and_stops_when_left(app, live, monkeypatch):
    monkeypatch.setattr("llmgw.console.app.REFRESH_S", 0.01)
    await open_view(app, "Replicas")
    assert "qwen-small-0001" in screen(app)
    await live.cluster.scale_model("qwen-small", _scale(min=2), actor="other")
    loop = asyncio.get_running_loop().create_task(app.watch())
    for _ in range(200):
        await asyncio.sleep(0.01)
        if "qwen-small-0002" in screen(app):
            break
    assert "qwen-small-0002" in screen(app)
    app.leave()
    await asyncio.wait_for(loop, 2)


def _scale(**given):
    from llmgw.admin.cluster_types import ScaleChange

    return ScaleChange(**given)


async def test_refusals_come_back_word_for_word(live):
    api = AdminApi(live.url, live.TOKEN, "ann")
    try:
        with pytest.raises(AdminError) as exc:
            await api.post("/models/qwen-small/scale", {"min": 5})
        assert exc.value.status == 400 and exc.value.message == "scaling of qwen-small: min: 5 is more than max (2)"
        with pytest.raises(AdminError) as exc:
            await AdminApi(live.url, "wrong", "ann").get("/summary")
        assert exc.value.status == 401
    finally:
        await api.close()


def test_the_address_and_token_are_found_as_ctl_finds_them(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_ADMIN_URL", raising=False)
    monkeypatch.delenv("LLMGW_ADMIN_TOKEN", raising=False)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    args = argparse.Namespace(admin="http://127.0.0.1:9999", token_file=str(token), actor="ann")
    api = AdminApi.from_args(args)
    assert (api.url, api.token, api.actor) == ("http://127.0.0.1:9999", "s3cret", "ann")
    api = AdminApi.from_args(argparse.Namespace(admin=None, token_file=None, actor=None),
                             {"LLMGW_ADMIN_URL": "http://127.0.0.1:1234", "LLMGW_ADMIN_TOKEN": "t"})
    assert (api.url, api.token) == ("http://127.0.0.1:1234", "t")


def test_bare_llmgw_opens_the_console_on_a_terminal_with_a_token(tmp_path, monkeypatch):
    monkeypatch.setattr("llmgw.cli.ctl_client.default_token_file", lambda: str(tmp_path / "absent"))
    monkeypatch.delenv("LLMGW_ADMIN_TOKEN", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True, raising=False)
    assert not admin_token_found()
    assert cli_main._default_command() is None
    monkeypatch.setenv("LLMGW_ADMIN_TOKEN", "t")
    assert cli_main._default_command() == "console"
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert cli_main._default_command() is None


def test_console_without_a_terminal_says_so(capsys):
    assert cli_main.main(["console"]) == 2
    assert "needs a terminal" in capsys.readouterr().err
