"""Each event is sent from where it happens: the reconciler (a model parked, a node lost), the budgets,
the update checks; and the server puts the notifier where they find it."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket

import pytest
from control.conftest import Harness, control, model, register

from llmgw.accounting.api import LimitExceeded
from llmgw.accounting.budgets import BudgetBook
from llmgw.mirror.updates import ModelUpdate, UpdateWatcher
from llmgw.notify.notifier import Notifier

from .conftest import fast_sinks, server_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def sent(n: Notifier) -> None:
    await n.start()
    await asyncio.wait_for(n._queue.join(), 5)
    await n.stop()


async def test_a_model_parked_by_the_reconciler_is_delivered(receiver):
    n = Notifier(server_config({"url": receiver.url + "/hook", "secret": "k"}).notify, fast_sinks(), source="cp-1")
    h = Harness([model("broken")], config=control(park_after=2, backoff=(1, 1)))
    h.rec.notify = n.emit
    h.connect(register("node-a"))
    for wait in (0, 1):
        await h.tick(wait)
        [(node_id, start)] = h.agents.starts()
        h.status(node_id, start.shard_id, "failed", message="llama-server: unknown model architecture")
    await h.tick(3600)  # parked stays parked, and is told once
    await sent(n)
    [got] = receiver.received
    body = got.json()
    assert (body["kind"], body["subject"], body["source"]) == ("model_parked", "broken", "cp-1")
    assert body["details"] == {"model": "broken", "failures": 2, "last_node": "node-a",
                               "reason": "llama-server: unknown model architecture"}
    assert body["summary"].startswith("broken is parked after 2 failed starts in a row")
    assert got.headers["X-Llmgw-Event"] == "model_parked" and "X-Llmgw-Signature" in got.headers


async def test_a_node_lost_past_the_heartbeat_window_is_told_once():
    told = []
    h = Harness([model("qwen")])
    h.rec.notify = told.append
    h.connect(register("node-a"))
    started = await h.start_ready()
    h.agents.connected.discard("node-a")  # silent from now on: no heartbeats
    await h.tick(10)
    assert told == []  # inside the 15 s window
    await h.tick(10)
    await h.tick(10)
    [event] = told
    assert (event.kind, event.subject) == ("node_lost", "node-a")
    assert event.details["replicas"] == [started[0][1].shard_id] and event.details["models"] == ["qwen"]
    assert event.summary.startswith("Node node-a is lost: its agent has not been heard for 15 s")


class SpentStore:
    """A store whose every scope has spent 1000 micro-dollars this period."""

    async def spend_since(self, kind, scope_id, start):
        return 1000


async def told_now(book: BudgetBook) -> None:
    """Let the book's telling tasks (a store claim, then the event) run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_budget_refusing_a_request_is_told_once_per_scope_and_period():
    now = [dt.datetime(2026, 9, 30, 23, 0, tzinfo=dt.UTC)]
    book = BudgetBook(SpentStore(), clock=lambda: now[0], currency="USD")  # type: ignore[arg-type]
    told = []
    book.notify = told.append
    [team] = await book.states([("team", "t-42", "month")])
    [roomy] = await book.states([("project", "p-7", "month")])
    for _ in range(3):
        with pytest.raises(LimitExceeded):
            book.check([(team, 1000)], 10)
    await told_now(book)
    [event] = told
    assert (event.kind, event.subject) == ("budget_spent", "team:t-42")
    assert event.details["period"] == "month" and event.details["budget_micros"] == 1000
    assert event.details["renews_at"] == "2026-10-01T00:00:00Z"
    assert (event.details["reason"], event.details["threshold"], event.details["spent_micros"]) == ("refused", None,
                                                                                                    1000)
    assert "monthly budget" in event.summary and "renews at 2026-10-01 00:00 UTC" in event.summary

    # Not spent, but too dear for what is left: a refusal too, told once.
    for _ in range(2):
        with pytest.raises(LimitExceeded):
            book.check([(roomy, 1005)], 10)
    await told_now(book)
    assert len(told) == 2 and told[1].subject == "project:p-7" and told[1].details["reason"] == "refused"
    assert "refused a request" in told[1].summary

    now[0] = dt.datetime(2026, 10, 1, 0, 1, tzinfo=dt.UTC)  # a new month: a new budget, spent again
    [team] = await book.states([("team", "t-42", "month")])
    with pytest.raises(LimitExceeded):
        book.check([(team, 1000)], 10)
    await told_now(book)
    assert len(told) == 3 and told[2].details["renews_at"] == "2026-11-01T00:00:00Z"
    await book.close()


async def test_a_budget_held_by_requests_in_progress_tells_nothing():
    book = BudgetBook(SpentStore(), currency="USD")  # type: ignore[arg-type]
    told = []
    book.notify = told.append
    [team] = await book.states([("team", "t-9", "month")])  # 1000 spent of 2000
    book.hold([team], 900)
    with pytest.raises(LimitExceeded, match="in progress"):
        book.check([(team, 2000)], 500)  # it would fit but for the holds: a second's wait, not worth telling
    await told_now(book)
    assert told == []
    await book.close()


async def test_a_share_of_a_budget_crossed_is_told_once_each():
    book = BudgetBook(SpentStore(), currency="USD")  # type: ignore[arg-type]
    book.notify_at = (0.5, 0.8)
    told, counted = [], []
    book.notify = told.append
    book.count_event = lambda scope, threshold: counted.append((scope, threshold))
    [team] = await book.states([("team", "t-1", "day")])  # 1000 spent of 3000: under both
    book.check([(team, 3000)], 10)
    await told_now(book)
    assert told == []
    book.charge([("team", "t-1")], 600)  # 1600 of 3000: past half
    book.charge([("team", "t-1")], 10)
    await told_now(book)
    assert [e.details["threshold"] for e in told] == [0.5] and counted == [("team", "0.5")]
    assert "daily budget" in told[0].summary and "is 50% spent" in told[0].summary
    book.charge([("team", "t-1")], 900)  # 2500 of 3000: past 0.8
    book.check([(team, 3000)], 10)
    await told_now(book)
    assert [e.details["threshold"] for e in told] == [0.5, 0.8]
    assert counted == [("team", "0.5"), ("team", "0.8")]
    await book.close()


class Checker:
    via = "registry"

    def __init__(self) -> None:
        self.rows: list[ModelUpdate] = []

    async def check(self, models):
        return self.rows


async def test_a_model_update_is_told_once_per_new_revision():
    checker = Checker()
    watcher = UpdateWatcher(checker, list, interval=3600)  # type: ignore[arg-type]
    told = []
    watcher.notify = told.append
    checker.rows = [ModelUpdate("chat", "mirror:tiny/v1/tiny.gguf", "tiny", repo="acme/tiny", status="up to date")]
    await watcher.check_now()
    assert told == []
    newer = ModelUpdate("chat", "mirror:tiny/v1/tiny.gguf", "tiny", repo="acme/tiny", status="newer files",
                        changed=("tiny.gguf",), upstream_revision="abc")
    checker.rows = [newer]
    await watcher.check_now()
    await watcher.check_now()
    [event] = told
    assert (event.kind, event.subject) == ("model_update_available", "chat")
    assert event.details["changed"] == ["tiny.gguf"] and event.details["repo"] == "acme/tiny"
    checker.rows = [ModelUpdate("chat", newer.source, "tiny", repo="acme/tiny", status="newer files",
                                changed=("tiny.gguf",), upstream_revision="def")]
    await watcher.check_now()
    assert len(told) == 2


async def test_the_control_plane_hands_the_notifier_to_its_reconciler_and_update_checks(tmp_path):
    from control.conftest import ENGINES

    from llmgw.config.load import parse_server_config
    from llmgw.control.service import ControlPlane
    from llmgw.router.replicas import ReplicaSet
    from llmgw.store import open_store

    config = parse_server_config({"agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True})
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    told = []
    plane = ControlPlane(config, store, ReplicaSet(), engines=ENGINES, notify=told.append)
    try:
        await plane.start()
        assert plane.reconciler.notify == told.append and plane.updates.notify == told.append
    finally:
        await plane.stop()
        await store.close()


async def test_the_server_gives_the_admin_api_its_notifier_as_a_gateway_only_too(tmp_path, receiver):
    """`llmgw server` as a gateway only (control.enabled: false) with a sink: the admin API tests it."""
    import aiohttp

    from llmgw.config.load import parse_server_config
    from llmgw.server import run_server

    admin = f"127.0.0.1:{free_port()}"
    config = parse_server_config({
        "listen": f"127.0.0.1:{free_port()}", "admin_listen": admin, "metrics_listen": "",
        "admin_token_file": str(tmp_path / "admin-token"), "store": {"dsn": str(tmp_path / "llmgw.db")},
        "control": {"enabled": False},
        "notify": {"sinks": [{"url": receiver.url + "/hook", "name": "ops"}]},
    })
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(config, stop=stop, drain_seconds=1))
    try:
        async with aiohttp.ClientSession() as http:
            answer = None
            for _ in range(250):
                if (tmp_path / "admin-token").exists():
                    headers = {"Authorization": f"Bearer {(tmp_path / 'admin-token').read_text().strip()}"}
                    try:
                        async with http.post(f"http://{admin}/api/v1/notify/test", headers=headers,
                                             json={}) as resp:
                            answer = await resp.json()
                            break
                    except aiohttp.ClientConnectionError:
                        pass
                await asyncio.sleep(0.02)
        assert answer is not None and answer["ok"], answer
        assert [r.json()["kind"] for r in receiver.received] == ["test"]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


async def test_the_gateway_app_tells_its_budgets(tmp_path, aiohttp_client):
    from llmgw.config.load import parse_server_config
    from llmgw.notify.wiring import NOTIFIER, install_notifier
    from llmgw.router.gateway import GATEWAY
    from llmgw.server import make_gateway_app

    config = parse_server_config({"store": {"dsn": str(tmp_path / "llmgw.db")},
                                  "notify": {"sinks": [{"url": "http://127.0.0.1:9/hook"}]}})
    app = make_gateway_app(config)  # the store, the resolver and the accountant built in its cleanup context
    notifier = install_notifier(app, config)
    await aiohttp_client(app)
    assert app[NOTIFIER] is notifier
    assert app[GATEWAY].accountant.budgets.notify == notifier.emit
