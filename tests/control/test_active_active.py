"""Active-active gateways, in one process: the leader's replica set reaches a standby's router through the store,
a copy too old is refused in words, and a standby that takes over keeps serving what it copied."""

from __future__ import annotations

import asyncio
import json

import pytest

from llmgw.control.engine_keys import EngineKeys
from llmgw.control.leader import Leadership
from llmgw.control.replica_view import ReplicaView
from llmgw.router.admission import NoReplica
from llmgw.router.replicas import Replica, ReplicaSet
from llmgw.store import open_store

from .conftest import Clock

KEYS = EngineKeys(b"k" * 32)
TTL = 30.0


class _CutStore:
    """A store that can be cut off: every call fails while `cut`."""

    def __init__(self, real) -> None:
        self.real = real
        self.cut = False

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        async def call(*args, **kwargs):
            if self.cut:
                raise ConnectionError("the store is unreachable")
            return await attr(*args, **kwargs)

        return call


def _replica(rid: str, model: str = "tiny", port: int = 9001) -> Replica:
    return Replica(id=rid, model=model, base_url=f"http://10.0.0.7:{port}/v1", source="control",
                   max_concurrency=8, labels={"pool": "a"})


@pytest.fixture
async def pair(tmp_path):
    """A leader and a standby on one store, each with its own router's replica set and a clock moved by hand."""
    s1 = await open_store(f"sqlite:///{tmp_path}/s.db")
    s2 = _CutStore(await open_store(f"sqlite:///{tmp_path}/s.db"))
    one, two = Leadership(s1, "cp-1", TTL), Leadership(s2, "cp-2", TTL)
    assert await one.step() and not await two.step()
    clock = Clock()
    leader_set, standby_set = ReplicaSet(), ReplicaSet()
    leader = ReplicaView(s1, leader_set, one, KEYS, max_age=2 * TTL, adopt_grace=15, clock=clock)
    standby = ReplicaView(s2, standby_set, two, KEYS, max_age=2 * TTL, adopt_grace=15, clock=clock)
    yield leader, standby, clock
    await s1.close()
    await s2.real.close()


async def test_a_standby_serves_the_leaders_replicas_with_their_engine_keys(pair):
    leader, standby, _ = pair
    leader.replicas.add(_replica("tiny-1"))
    leader.replicas.add(Replica(id="static", model="ext", base_url="http://x/v1"))  # server.yaml's: not copied
    await leader.step()
    await standby.step()
    copied = standby.replicas.get("tiny-1")
    assert copied is not None and copied.source == "view" and copied.in_cluster
    assert (copied.base_url, copied.max_concurrency, copied.labels) == ("http://10.0.0.7:9001/v1", 8, {"pool": "a"})
    assert copied.api_key.reveal() == KEYS.key_for("tiny-1")  # derived from the shared secret, never stored
    row = await leader.store.get_replica_view("control-plane")
    assert "llmgw-engine-" not in row.body and KEYS.key_for("tiny-1") not in row.body
    assert standby.replicas.get("static") is None
    assert standby.describe()["role"] == "standby" and standby.describe()["replica_view"]["version"] == 1
    assert leader.describe()["role"] == "leader" and leader.describe()["replica_view"]["age_s"] == 0.0

    # An address change and a replica gone reach the standby; a set that did not change is only confirmed.
    leader.replicas.update("tiny-1", base_url="http://10.0.0.8:9001/v1")
    leader.replicas.add(_replica("tiny-2", port=9002))
    await leader.step()
    await standby.step()
    assert standby.replicas.get("tiny-1").base_url == "http://10.0.0.8:9001/v1"
    assert {r.id for r in standby.replicas} == {"tiny-1", "tiny-2"}
    leader.replicas.remove("tiny-1")
    await leader.step()
    await standby.step()
    assert {r.id for r in standby.replicas} == {"tiny-2"} and standby.version == 3
    await leader.step()
    assert leader.version == 3  # confirmed, not written again


async def test_a_standby_cut_off_from_the_store_past_the_bound_refuses_in_words(pair):
    leader, standby, clock = pair
    leader.replicas.add(_replica("tiny-1"))
    await leader.step()
    await standby.step()
    admission_set = standby.replicas
    assert admission_set.replicas_for("tiny")

    standby.store.cut = True
    clock.advance(2 * TTL - 1)
    await standby.step()  # within the bound: serves on from its copy
    assert admission_set.replicas_for("tiny") and not standby.stale
    assert "the store did not answer" in standby.describe()["replica_view"]["error"]
    clock.advance(2)
    await standby.step()
    assert standby.stale and not admission_set.replicas_for("tiny")
    error = NoReplica("tiny", 0, why=admission_set.unavailable_reason)
    assert error.status == 503
    assert "standby" in error.message and "61 s old" in error.message and "has not answered" in error.message

    # The store back, the leader still confirming: it serves again.
    standby.store.cut = False
    await leader.step()
    await standby.step()
    assert not standby.stale and admission_set.replicas_for("tiny") and admission_set.unavailable_reason == ""


async def test_a_view_no_leader_confirms_is_refused_past_the_bound(pair):
    leader, standby, clock = pair
    leader.replicas.add(_replica("tiny-1"))
    await leader.step()
    await standby.step()
    clock.advance(2 * TTL + 1)  # the leader wrote nothing since (it is gone), and nobody took over
    await standby.step()
    assert standby.stale and "no leader has confirmed" in standby.replicas.unavailable_reason


async def test_a_standby_that_takes_over_keeps_what_it_copied_until_adopted(pair):
    leader, standby, clock = pair
    leader.replicas.add(_replica("tiny-1"))
    leader.replicas.add(_replica("tiny-2", port=9002))
    await leader.step()
    await standby.step()

    # The leader is gone; the standby takes the lease.
    await leader.leadership.store.release_lease("control-plane", "cp-1")
    assert await standby.leadership.step()
    await standby.step()
    assert {r.id for r in standby.replicas} == {"tiny-1", "tiny-2"}  # still served
    row = await standby.store.get_replica_view("control-plane")
    assert row.holder == "cp-2" and len(json.loads(row.body)["replicas"]) == 2

    # Its reconciler adopts tiny-1 (the agent registered again); tiny-2's node never came back.
    standby.replicas.add(_replica("tiny-1"))
    assert standby.replicas.get("tiny-1").source == "control"
    clock.advance(16)
    await standby.step()
    assert {r.id for r in standby.replicas} == {"tiny-1"}

    # The former leader cannot overwrite the new leader's view with its older epoch.
    assert await leader.store.publish_replica_view("control-plane", "cp-1", 1, '{"replicas":[]}') is None


async def test_a_replica_used_only_through_a_standby_is_not_stopped_as_idle(tmp_path):
    import time

    from llmgw.control.replica_view import feed_reconciler

    from .conftest import Harness, model, register

    h = Harness([model("lazy", scaling={"min": 0, "max": 1, "on_demand": True, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    waiting = asyncio.create_task(h.rec.ensure_started("lazy", timeout=5))
    await asyncio.sleep(0)
    await h.tick()
    [(_, start)] = h.agents.starts()
    h.status("node-a", start.shard_id, "ready", port=h.port_for(start))
    await asyncio.wait_for(waiting, 1)

    s1 = await open_store(f"sqlite:///{tmp_path}/s.db")
    s2 = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        one, two = Leadership(s1, "cp-1", TTL), Leadership(s2, "cp-2", TTL)
        assert await one.step() and not await two.step()
        leader = ReplicaView(s1, h.replicas, one, h.keys, max_age=2 * TTL, adopt_grace=15,
                             used_elsewhere=feed_reconciler(h.rec), clock=h.clock)
        standby = ReplicaView(s2, ReplicaSet(), two, h.keys, max_age=2 * TTL, adopt_grace=15)
        await leader.step()
        await standby.step()
        copied = standby.replicas.get(start.shard_id)
        assert copied is not None

        async def standby_client_request() -> None:
            copied.last_chosen = time.monotonic()  # the standby's router chose it for a client
            await standby.step()  # its report of use
            await leader.step()  # read by the leader

        await standby_client_request()  # the first report the leader sees is only noted
        await h.tick(50)
        await standby_client_request()
        await h.tick(50)  # 100 s since the leader's own router last chose it: idle but for the standby
        assert h.agents.stops() == []
        assert h.rec.used_elsewhere == {start.shard_id: pytest.approx(h.clock.now - 50, abs=1)}
        await h.tick(61)  # the standby's clients went away too
        [(_, stop)] = h.agents.stops()
        assert stop.shard_id == start.shard_id
    finally:
        await s1.close()
        await s2.close()


async def test_the_store_keeps_views_by_version_and_epoch(store_dsn):
    store = await open_store(store_dsn)
    try:
        assert await store.get_replica_view("control-plane") is None
        assert await store.publish_replica_view("control-plane", "cp-1", 1, '{"replicas":[]}') == 1
        assert await store.publish_replica_view("control-plane", "cp-1", 1, '{"replicas":[]}') == 1  # same set
        assert await store.publish_replica_view("control-plane", "cp-1", 1, '{"replicas":[1]}') == 2
        assert await store.confirm_replica_view("control-plane", "cp-1", 1)
        assert not await store.confirm_replica_view("control-plane", "cp-2", 1)
        row = await store.get_replica_view("control-plane", unless_version=2)
        assert (row.version, row.body, row.holder) == (2, None, "cp-1")
        assert (await store.get_replica_view("control-plane", unless_version=1)).body == '{"replicas":[1]}'
        assert await store.publish_replica_view("control-plane", "cp-2", 2, '{"replicas":[1]}') == 3
        assert await store.publish_replica_view("control-plane", "cp-1", 1, "{}") is None  # an older epoch
        await store.publish_replica_view("use:b", "cp-b", 1, '{"replicas":{}}')
        await store.publish_replica_view("use:a", "cp-a", 1, '{"replicas":{}}')
        assert [r.name for r in await store.list_replica_views("use:")] == ["use:a", "use:b"]
    finally:
        await store.close()


async def test_a_standby_has_the_leader_start_an_on_demand_model_and_waits_for_it(tmp_path):
    from llmgw.control.replica_view import feed_reconciler, start_on_demand

    from .conftest import Harness, model, register

    h = Harness([model("lazy", scaling={"min": 0, "max": 1, "on_demand": True, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    await h.tick()
    assert h.agents.starts() == []  # nothing asked for it yet
    s1 = await open_store(f"sqlite:///{tmp_path}/s.db")
    s2 = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        one, two = Leadership(s1, "cp-1", TTL), Leadership(s2, "cp-2", TTL)
        assert await one.step() and not await two.step()
        leader = ReplicaView(s1, h.replicas, one, h.keys, max_age=2 * TTL, adopt_grace=15, clock=h.clock,
                             used_elsewhere=feed_reconciler(h.rec), wanted_elsewhere=start_on_demand(h.rec))
        standby = ReplicaView(s2, ReplicaSet(), two, h.keys, max_age=2 * TTL, adopt_grace=15)
        await leader.step()
        await standby.step()
        await standby.step()  # a report with nothing used or wanted is not written
        await leader.step()

        waiting = asyncio.create_task(standby.wait_started("lazy", timeout=10))  # a client's request
        started = []
        for _ in range(40):
            await standby.step()
            await leader.step()
            await asyncio.sleep(0.05)
            await h.tick()
            for node_id, msg in h.agents.starts():
                h.status(node_id, msg.shard_id, "ready", port=h.port_for(msg))
                started.append(msg.shard_id)
            if waiting.done():
                break
        await asyncio.wait_for(waiting, 1)
        assert len(started) == 1 and standby.replicas.get(started[0]) is not None

        with pytest.raises(TimeoutError):  # a model the leader does not start: the wait ends in time
            await standby.wait_started("nothing-like-it", timeout=0.3)
    finally:
        await s1.close()
        await s2.close()
