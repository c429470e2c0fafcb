"""Cluster settings kept in the store are what running servers use: at start, at once, and within seconds."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import openai
import pytest
from aiohttp import web

from llmgw.admin import in_force as in_force_module
from llmgw.admin.in_force import ConfigInForce, overlay
from llmgw.config import parse_server_config
from llmgw.config.load import load_server_config
from llmgw.server import run_server
from llmgw.store import open_store

HELLO = [{"role": "user", "content": "Hello there."}]
ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FlakyEngines:
    """Three engines (paths /a, /b and /c of one listener) that answer 503 to the next `fail` requests, whichever
    of them gets each: a request succeeds only when the gateway may try as many replicas as that."""

    def __init__(self) -> None:
        self.fail = 0
        self.seen = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _chat(self, request: web.Request) -> web.Response:
        self.seen += 1
        if self.fail > 0:
            self.fail -= 1
            return web.json_response({"error": {"message": "busy"}}, status=503)
        return web.json_response(ANSWER)

    async def start(self) -> FlakyEngines:
        app = web.Application()
        app.router.add_post("/{engine}/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def engines():
    running = await FlakyEngines().start()
    yield running
    await running.close()


def server_yaml(tmp_path, name: str, engines: FlakyEngines, extra: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""\
listen: "127.0.0.1:{free_port()}"
admin_listen: "127.0.0.1:{free_port()}"
admin_token_file: {tmp_path / "admin-token"}
metrics_listen: ""
store:
  dsn: {tmp_path / "llmgw.db"}
control:
  enabled: false
auth:
  keys_required: false
router:
  retries:
    attempts: 0
    backoff: 1ms
models:
  - name: m
    endpoints:
      - url: {engines.url}/a/v1
      - url: {engines.url}/b/v1
      - url: {engines.url}/c/v1
{extra}""", encoding="utf-8")
    return str(path)


class Running:
    """One `llmgw server` (run_server) in this process, with its admin API and an OpenAI client."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = load_server_config(path)
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.admin = f"http://{self.config.admin_listen}/api/v1"
        self.base = f"http://{self.config.listen}"
        self.http: aiohttp.ClientSession | None = None
        self.headers: dict[str, str] = {}

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(run_server(self.config, stop=self.stop, drain_seconds=1,
                                                   config_path=self.path))
        self.http = aiohttp.ClientSession()
        token_file = self.config.admin_token_file
        for _ in range(250):
            if self.task.done():
                self.task.result()
            try:
                self.headers = {"Authorization": f"Bearer {Path(token_file).read_text().strip()}"}
                async with self.http.get(self.admin + "/settings", headers=self.headers) as resp:
                    if resp.status == 200:
                        break
            except (OSError, aiohttp.ClientConnectionError):
                pass
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the server did not start")
        self.client = openai.AsyncOpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        await self.http.close()
        self.stop.set()
        assert await asyncio.wait_for(self.task, 10) == 0

    async def call(self, method: str, path: str, body=None):
        body = {} if body is None and method != "GET" else body
        async with self.http.request(method, self.admin + path, headers=self.headers, json=body) as resp:
            answer = await resp.json()
            assert resp.status == 200, answer
            return answer

    async def config_key(self, key: str) -> dict:
        return next(k for k in (await self.call("GET", "/server-config"))["keys"] if k["key"] == key)

    async def ask(self) -> bool:
        """One chat request: True when it was answered."""
        try:
            await self.client.chat.completions.create(model="m", messages=HELLO, max_tokens=1)
        except openai.APIStatusError as exc:
            assert exc.status_code == 502, exc
            return False
        return True


async def test_a_setting_put_through_the_api_changes_what_a_client_sees_at_once(engines, tmp_path):
    async with Running(server_yaml(tmp_path, "cp-1", engines)) as cp:
        engines.fail = 2
        assert not await cp.ask()  # server.yaml: no further replica is tried
        engines.fail = 0

        info = await cp.call("PUT", "/settings/router.retries.attempts", {"value": 2})
        assert (info["value"], info["source"], info["applies"], info["restart_pending"]) == (2, "store", "live", False)
        engines.fail, engines.seen = 2, 0
        assert await cp.ask() and engines.seen == 3  # two replicas busy, the third answers
        assert (await cp.config_key("router.retries.attempts"))["value"] == 2
        saved = await cp.call("PUT", "/server-config", {"set": {"router.retries.attempts": 5}})
        assert saved["changed"][0]["takes_effect"] == "when unset in the store" and saved["applied"] == []
        assert (await cp.config_key("router.retries.attempts"))["value"] == 2  # the store's still wins

        info = await cp.call("DELETE", "/settings/router.retries.attempts")
        assert (info["value"], info["source"], info["restart_pending"]) == (5, "file", False)
        await cp.call("PUT", "/server-config", {"set": {"router.retries.attempts": 0}})
        engines.fail = 1
        assert not await cp.ask()  # server.yaml's value again
        engines.fail = 0
        assert await cp.ask()


async def test_the_dial_timeout_waits_for_a_restart_and_says_so(engines, tmp_path):
    async with Running(server_yaml(tmp_path, "cp-1", engines)) as cp:
        listed = {s["key"]: s for s in (await cp.call("GET", "/settings"))["settings"]}
        assert listed["router.timeouts.dial"]["applies"] == "restart"
        assert {k for k, s in listed.items() if s["applies"] == "restart"} == {"router.timeouts.dial"}
        info = await cp.call("PUT", "/settings/router.timeouts.dial", {"value": "2s"})
        assert (info["value"], info["applies"], info["restart_pending"]) == ("2s", "restart", True)
        key = await cp.config_key("router.timeouts.dial")
        assert (key["applies"], key["restart_pending"], key["value"], key["store_value"]) == \
            ("restart", True, "5s", "2s")  # what runs is what the connection pool was made with
        assert "router.timeouts.dial" in (await cp.call("GET", "/server-config"))["restart_pending"]
    # The next start takes it up.
    async with Running(server_yaml(tmp_path, "cp-1", engines)) as cp:
        key = await cp.config_key("router.timeouts.dial")
        assert (key["value"], key["restart_pending"]) == ("2s", False)
        assert (await cp.call("GET", "/settings/router.timeouts.dial"))["restart_pending"] is False


async def test_a_server_started_after_a_setting_was_stored_uses_it_from_the_start(engines, tmp_path, caplog):
    store = await open_store(str(tmp_path / "llmgw.db"))
    await store.set_setting("router.retries.attempts", 2, actor="ann")
    await store.set_setting("router.retries.backoff", "a while", actor="someone-past-the-api")  # refused
    await store.set_setting("admission.queue_depth", 0, actor="someone-past-the-api")  # below its least
    await store.close()
    with caplog.at_level(logging.WARNING, logger="llmgw.server"):
        async with Running(server_yaml(tmp_path, "cp-1", engines)) as cp:
            engines.fail = 2
            assert await cp.ask()
            backoff = await cp.call("GET", "/settings/router.retries.backoff")
            assert (backoff["value"], backoff["source"]) == ("1ms", "file")
            assert "expected a duration" in backoff["problem"]
            assert (await cp.config_key("admission.queue_depth"))["value"] == 256
            assert (await cp.call("GET", "/settings/router.retries.attempts"))["problem"] is None
    skipped = [r for r in caplog.records if r.getMessage().startswith("a cluster setting in the store cannot be used")]
    assert sorted(r.fields["key"] for r in skipped) == ["admission.queue_depth", "router.retries.backoff"]


async def test_another_control_plane_takes_a_stored_setting_up_within_its_period(engines, tmp_path, monkeypatch):
    monkeypatch.setattr(in_force_module, "WATCH_S", 0.1)
    async with Running(server_yaml(tmp_path, "cp-1", engines)) as one, \
            Running(server_yaml(tmp_path, "cp-2", engines)) as two:
        async with two.http.get(two.base + "/signup") as resp:
            assert resp.status == 404  # server.yaml: sign-up closed
        await one.call("PUT", "/settings/router.retries.attempts", {"value": 2})
        await one.call("PUT", "/settings/auth.signup_open", {"value": True})
        # Nothing is asked of cp-2's admin API (which reads the store itself): only its own watch can do it.
        # Generous on a busy machine: the watch runs every 0.1 s here; what is checked is that it happens at all.
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            engines.fail = 2
            if await two.ask():
                break
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("cp-2 did not take up router.retries.attempts")
            await asyncio.sleep(0.05)
        while True:
            async with two.http.get(two.base + "/signup") as resp:
                if resp.status == 200:
                    break
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("cp-2 did not take up auth.signup_open")
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the configuration in force, on its own


def test_the_store_wins_key_by_key_and_a_bad_value_leaves_the_files():
    file = parse_server_config({"router": {"retries": {"attempts": 1}}, "admission": {"max_wait": "10s"}})
    config, problems = overlay(file, {"router.retries.attempts": 4, "admission.max_wait": "45s",
                                      "admission.default_band": "platinum", "guard.attach": [], "quotas": {}})
    assert (config.router.retries.attempts, str(config.admission.max_wait)) == (4, "45s")
    assert config.admission.default_band == "silver" and list(problems) == ["admission.default_band"]
    assert "expected one of gold, silver, bronze" in problems["admission.default_band"]


class FakeStore:
    def __init__(self, **values) -> None:
        self.values = values

    async def get_settings(self):
        return {k: SimpleNamespace(value=v) for k, v in self.values.items()}


async def test_a_bad_value_is_logged_once_per_change_and_never_taken(caplog):
    from llmgw.server.live import LIVE_KEYS

    class Live:
        keys = frozenset(LIVE_KEYS)

        def __init__(self) -> None:
            self.given = []

        def apply(self, running, new):
            self.given.append(new)
            return new, []

    file = parse_server_config({})
    live = Live()
    state = ConfigInForce(file, live=live)
    store = FakeStore(**{"router.retries.attempts": 99})
    with caplog.at_level(logging.WARNING, logger="llmgw.server"):
        await state.refresh(store)
        await state.refresh(store)  # unchanged: nothing read is taken up or logged again
        state.take_up(file=file)  # a change of the file: the same problem, not said again
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert "above the most allowed, 10" in caplog.records[0].fields["problem"]
    assert state.running.router.retries.attempts == 2 and len(live.given) == 2
    store.values["router.retries.attempts"] = 3
    await state.refresh(store)
    assert state.running.router.retries.attempts == 3 and state.problems == {}


async def test_a_store_away_is_said_once_and_what_runs_stays(caplog):
    class Away:
        async def get_settings(self):
            raise OSError("connection refused")

    state = ConfigInForce(parse_server_config({}))
    with caplog.at_level(logging.WARNING, logger="llmgw.server"):
        task = asyncio.create_task(in_force_module.watch(state, Away(), every=0.01))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [r.getMessage() for r in caplog.records] == ["cluster settings not read; what runs is unchanged"]
