"""Do → Test notifications: a test event to each sink of server.yaml, and how each answered."""

from __future__ import annotations

from aiohttp import web
from console_screen import keys, open_view, screen

from llmgw.admin.testing import LiveAdmin
from llmgw.config import parse_server_config
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi


async def test_a_test_event_goes_to_each_sink_and_the_answers_are_shown(tmp_path, aiohttp_server):
    got: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        got.append(request.path)
        return web.Response(status=200 if request.path == "/ops" else 400, text="no")

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    receiver = await aiohttp_server(app)
    base = f"http://127.0.0.1:{receiver.port}"
    config = parse_server_config({"notify": {"sinks": [{"url": base + "/ops", "name": "ops"},
                                                       {"url": base + "/gone", "name": "old"}]}})
    with LiveAdmin(tmp_path, config=config) as live:
        console = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-test")
        try:
            await open_view(console, "Test notifications")
            assert "A test event goes to every sink in server.yaml's notify section" in screen(console)
            await keys(console, "enter")
            for _ in range(100):
                if console.dialogs:
                    break
                await console.settle()
            text = screen(console)
            assert "A sink did not take the test event" in text
            assert "ops (webhook): took it, HTTP 200" in text
            assert "old (webhook): not delivered, HTTP 400 after" in text
            assert sorted(got) == ["/gone", "/ops"]
        finally:
            await console.settle()
            await console.api.close()
