"""Parked models kept in the store: a parking outlives its leader (a take-over or a restart on the same store),
a retry or a changed definition ends it there too, and a store that fails a write never breaks a pass."""

from __future__ import annotations

from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.catalog import model_to_spec
from llmgw.control.explain import explain, explain_text
from llmgw.control.parked import PARKED_SETTING
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store

from .conftest import ENGINES, Harness, control, model, register
from .test_service import server_config, until


async def park(h: Harness, name: str = "broken") -> str:
    """Fail `name`'s one start (park_after 1): it is parked; the reason."""
    h.connect(register("node-a"))
    await h.tick()
    [(_, start)] = h.agents.starts()
    h.status("node-a", start.shard_id, "failed", message="llama-server: unknown model architecture")
    await h.tick()
    info = explain(h.rec, name)
    assert info["status"] == "parked"
    return h.rec.models[name].park_reason


async def test_a_parked_model_stays_parked_on_the_control_plane_that_takes_over(sqlite_store):
    first = Harness([model("broken")], store=sqlite_store, config=control(park_after=1))
    reason = await park(first)
    kept = (await sqlite_store.get_setting(PARKED_SETTING)).value
    assert list(kept) == ["broken"] and kept["broken"]["reason"] == reason
    assert kept["broken"]["failures"] == 1 and kept["broken"]["at"].startswith("2025-03-10T00:00:00")
    assert kept["broken"]["spec"]["name"] == "broken"
    version = (await sqlite_store.get_setting(PARKED_SETTING)).version
    await first.tick(3600)
    assert (await sqlite_store.get_setting(PARKED_SETTING)).version == version  # written on a change only

    second = Harness([model("broken")], store=sqlite_store, config=control(park_after=1))
    second.connect(register("node-a"))
    await second.tick()
    assert second.agents.starts() == []
    info = explain(second.rec, "broken")
    assert (info["status"], info["parked"]) == ("parked", True)
    assert info["reason"] == reason + "; `llmgw ctl model retry broken` starts it again"
    assert reason in explain_text(info)

    # Retried on the new leader: gone from the store at the next write, started again.
    second.rec.retry("broken")
    await second.tick()
    assert len(second.agents.starts()) == 1
    assert (await sqlite_store.get_setting(PARKED_SETTING)).value == {}


async def test_a_leader_that_leads_again_reads_the_parked_models_back(sqlite_store):
    h = Harness([model("broken")], store=sqlite_store, config=control(park_after=1))
    reason = await park(h)
    h.rec.reset("no longer leading")
    assert "broken" not in h.rec.models
    h.connect(register("node-a"))
    await h.tick()
    assert h.agents.starts() == [] and explain(h.rec, "broken")["reason"].startswith(reason)


async def test_a_changed_definition_unparks_it_on_the_next_leader_and_leaves_the_store(sqlite_store):
    first = Harness([], store=sqlite_store, config=control(park_after=1))
    await first.catalog.add({"name": "broken", "engine": "sim", "profiles": [{"name": "default"}],
                             "scaling": {"min": 1, "max": 2}}, actor="ann")
    await park(first)
    await first.catalog.scale("broken", max=1, actor="ann")  # while no one leads: the next leader sees it

    second = Harness([], store=sqlite_store, config=control(park_after=1))
    second.connect(register("node-a"))
    await second.tick()
    assert len(second.agents.starts()) == 1
    assert explain(second.rec, "broken")["status"] == "starting"
    assert (await sqlite_store.get_setting(PARKED_SETTING)).value == {}


async def test_a_model_gone_from_the_catalog_is_dropped_from_the_store(sqlite_store):
    await sqlite_store.set_setting(PARKED_SETTING, {
        "gone": {"reason": "parked after 5 failed starts", "spec": {"name": "gone"}, "failures": 5, "at": None},
    }, actor="control-plane")
    h = Harness([model("qwen")], store=sqlite_store)
    h.connect(register("node-a"))
    await h.tick()
    assert len(h.agents.starts()) == 1
    assert (await sqlite_store.get_setting(PARKED_SETTING)).value == {}


class FailingWrites:
    """The store, but writing settings fails until `failing` is cleared."""

    def __init__(self, store) -> None:
        self._store = store
        self.failing = True

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def set_setting(self, key, value, *, actor):
        if self.failing:
            raise ConnectionError("the store is away")
        return await self._store.set_setting(key, value, actor=actor)


async def test_a_store_that_fails_the_write_does_not_break_the_pass_and_is_written_later(sqlite_store, caplog):
    store = FailingWrites(sqlite_store)
    h = Harness([model("broken"), model("qwen")], store=store, config=control(park_after=1))
    h.connect(register("node-a"))
    await h.tick()
    for node_id, start in h.agents.starts():
        h.status(node_id, start.shard_id, "failed" if start.model == "broken" else "ready",
                 message="bad", port=h.port_for(start))
    await h.tick()  # the write fails: logged once, the pass goes on
    await h.tick()
    assert explain(h.rec, "broken")["status"] == "parked"
    assert explain(h.rec, "qwen")["status"] == "ready"
    assert [r.message for r in caplog.records].count(
        "parked models not written to the store; written at the next pass") == 1
    assert await sqlite_store.get_setting(PARKED_SETTING) is None
    store.failing = False
    await h.tick()
    assert list((await sqlite_store.get_setting(PARKED_SETTING)).value) == ["broken"]


async def test_a_stored_value_that_cannot_be_read_is_not_overwritten(sqlite_store):
    kept = {"qwen": {"reason": "r", "spec": None}}
    await sqlite_store.set_setting(PARKED_SETTING, kept, actor="control-plane")
    store = FailingWrites(sqlite_store)
    store.failing = False

    async def unreadable(key):
        raise ConnectionError("the store is away")

    store.get_setting = unreadable
    h = Harness([model("qwen")], store=store)
    h.connect(register("node-a"))
    await h.tick()  # the pass goes on; nothing is written over what could not be read
    await h.rec.save_parked()
    assert not h.rec.parked_record.loaded
    assert (await sqlite_store.get_setting(PARKED_SETTING)).value == kept


async def test_explain_placement_after_a_restart_and_retry_clears_the_store_at_once(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    config = server_config()
    spec = model_to_spec(config.models[0])
    reason = "parked after 5 failed starts in a row; the last, on node-a: bad flag"
    await store.set_setting(PARKED_SETTING, {"tiny": {"reason": reason, "spec": spec, "failures": 5,
                                                      "at": "2025-03-10T00:00:00+00:00"}}, actor="control-plane")
    slot = ControlPlaneSlot()
    cluster = AdminCluster(slot)
    plane = ControlPlane(config, store, ReplicaSet(), engines=ENGINES, holder="cp-2")
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        await until(lambda: plane.reconciler.parked_record.loaded, what="the parked models to be read")
        explained = await cluster.explain_placement("tiny")
        assert explained.parked and explained.model.status == "parked"
        assert explained.model.reason.startswith(reason) and explained.failures == 5
        await cluster.retry_model("tiny", actor="ann")
        assert (await store.get_setting(PARKED_SETTING)).value == {}
    finally:
        await plane.stop()
        await store.close()


async def test_a_model_parked_by_a_failing_engine_is_placed_again_when_retried(tmp_path):
    import asyncio

    from llmgw.wire import messages as w

    from .test_service import FakeAgent

    class FailingAgent(FakeAgent):
        """Its engine fails every start while `failing`; then starts as the fake agent does."""

        failing = True
        starts = 0

        async def on_session(self, session) -> None:
            async for message in session:
                if isinstance(message, w.StartShard):
                    self.starts += 1
                    if self.failing:
                        await session.send(w.ShardStatus(shard_id=message.shard_id, state="failed", model=message.model,
                                                         message="engine exited: bad flag", exit_code=2,
                                                         command_id=message.command_id))
                        continue
                    self.ports[message.shard_id] = 20000 + len(self.ports)
                    await session.send(w.ShardStatus(shard_id=message.shard_id, state="ready", model=message.model,
                                                     port=self.ports[message.shard_id], command_id=message.command_id))

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    replicas = ReplicaSet()
    slot = ControlPlaneSlot()
    cluster = AdminCluster(slot)
    plane = ControlPlane(server_config(park_after=2, backoff={"initial": "50ms", "max": "100ms"}), store, replicas,
                         engines=ENGINES, holder="cp-1")
    agent = FailingAgent([f"127.0.0.1:{plane.config.agent_listen.rsplit(':', 1)[1]}"])
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        agent.start()
        await until(lambda: plane.explain("tiny")["status"] == "parked", what="tiny parked")
        assert agent.starts == 2
        await asyncio.sleep(0.3)  # a pass goes by: a parked model is not started again
        assert agent.starts == 2 and replicas.replicas_for("tiny") == []
        assert "tiny" in (await store.get_setting(PARKED_SETTING)).value

        agent.failing = False  # the operator fixed the node; the retry starts it now
        detail = await cluster.retry_model("tiny", actor="ann")
        assert detail.model.status != "parked"
        await until(lambda: replicas.replicas_for("tiny"), what="tiny placed again and ready")
        assert agent.starts == 3 and plane.explain("tiny")["status"] == "ready"
        assert (await store.get_setting(PARKED_SETTING)).value == {}
        assert [j.kind for j in plane.jobs.select(state=None, model="tiny")][0] == "retry"
    finally:
        await agent.stop()
        await plane.stop()
        await store.close()
