"""The leader's `upgrade` job over the real agent port: scripted agents that take or refuse an Upgrade as a real
one would (a real agent's replacement is in test_agent_self_upgrade.py and, end to end, test_upgrade_e2e_slow.py)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from upgrade_helpers import free_port, make_key, release_folder

from llmgw.config.load import parse_server_config
from llmgw.control.service import ControlPlane
from llmgw.control.upgrade import UpgradeError
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.release.store import add_release
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w
from llmgw.wire.channel import AgentConnection

OLD, NEW = "1.0.0", "1.1.0"


class ScriptedAgent:
    """One node: registers with `version` and one running shard; on Upgrade, refuses (`refuse`) or comes back
    with the release's version (or the one before, with back), the shard's pid the same."""

    def __init__(self, url: str | list[str], node: str, rack: str = "", refuse: str = "",
                 silent: bool = False) -> None:
        self.node, self.rack, self.refuse, self.silent = node, rack, refuse, silent
        self.version, self.before = OLD, ""
        self.asked: list[w.Upgrade] = []
        urls = [url] if isinstance(url, str) else url
        self.conn = AgentConnection(urls, self.register, backoff_initial=0.05, backoff_max=0.1)
        self.task = asyncio.create_task(self.conn.run(self.on_session))

    def register(self) -> w.Register:
        return w.Register(node_id=self.node, agent_version=self.version,
                          labels={"llmgw.io/rack": self.rack} if self.rack else {},
                          shards=(w.RunningShard(shard_id=f"{self.node}-s1", model="m", engine="sim", pid=4242),))

    async def on_session(self, session) -> None:
        async for message in session:
            if isinstance(message, w.Upgrade):
                self.asked.append(message)
                if self.silent:  # took it, and never comes back (a fetch that hangs, a start that fails)
                    continue
                if self.refuse:
                    await session.send(w.CommandResult(command_id=message.command_id, ok=False,
                                                       error=f"not upgraded: {self.refuse}"))
                    continue
                await session.send(w.CommandResult(command_id=message.command_id, ok=True))
                if message.back:
                    self.version, self.before = self.before, self.version
                else:
                    self.version, self.before = message.version, self.version
                return  # the connection ends; the agent registers again as its new self

    async def stop(self) -> None:
        await self.conn.stop()
        await asyncio.wait({self.task}, timeout=10)


@pytest.fixture
async def cluster(tmp_path):
    """(the leader, its agent URL, a signed release NEW on the mirror it names, a stranger's release 9.9.9)."""
    private, trust, public = make_key(tmp_path / "keys")
    stranger, stranger_trust, _ = make_key(tmp_path / "stranger")
    root = tmp_path / "mirror"
    root.mkdir()
    add_release(root, release_folder(tmp_path / "rel", NEW, private), trust)
    add_release(root, release_folder(tmp_path / "bad", "9.9.9", stranger), stranger_trust)
    runner = web.AppRunner(build_file_app(Layout(root)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    mirror = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    port = free_port()
    config = parse_server_config({"agent_listen": f"127.0.0.1:{port}", "agent_insecure": True,
                                  "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
                                  "mirror": {"url": mirror}, "releases": {"trusted_keys": [public]}})
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    plane = ControlPlane(config, store, ReplicaSet(), holder="cp-1", heartbeat_interval=0.2)
    await plane.start()
    assert await plane.leadership.wait_leading(3)
    agents: list[ScriptedAgent] = []
    yield plane, f"127.0.0.1:{port}", agents
    for a in agents:
        await a.stop()
    await plane.stop()
    await store.close()
    await runner.cleanup()


async def connected(plane, agents, *nodes) -> None:
    for _ in range(200):
        if all(plane.endpoint.sessions.get(a.node) is not None for a in agents):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the agents did not register")


async def ended(plane, job, timeout: float = 20):
    for _ in range(int(timeout / 0.05)):
        if not job.active:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job did not end: {job.now}")


async def test_each_node_in_turn_is_upgraded_and_one_already_there_is_passed_over(cluster):
    plane, url, agents = cluster
    agents += [ScriptedAgent(url, "node-a"), ScriptedAgent(url, "node-b"), ScriptedAgent(url, "node-c")]
    agents[2].version = NEW
    await connected(plane, agents)
    job = await ended(plane, await plane.upgrades.start({"release": NEW}, actor="ann"))
    steps = [s.text for s in job.steps]
    assert job.state == "done", steps
    assert job.kind == "upgrade" and job.by == "ann"
    assert any("signed by trusted key" in s for s in steps)
    assert any(s.startswith("node-a: back with llmgw 1.1.0 (was 1.0.0)") and "1 engine kept, same pids" in s
               for s in steps), steps
    assert "node-c: already runs llmgw 1.1.0" in steps
    order = [s.split(":")[0] for s in steps if s.endswith("asked to upgrade to 1.1.0")]
    assert order == ["node-a", "node-b"]
    assert [len(a.asked) for a in agents] == [1, 1, 0]
    assert all(plane.endpoint.sessions[a.node].register.agent_version == NEW for a in agents)


async def test_the_first_failure_stops_in_words_and_rollback_sends_the_upgraded_ones_back(cluster):
    plane, url, agents = cluster
    agents += [ScriptedAgent(url, "node-a"), ScriptedAgent(url, "node-b", refuse="signed by key abc, which is "
                                                           "not trusted here"), ScriptedAgent(url, "node-c")]
    await connected(plane, agents)
    job = await ended(plane, await plane.upgrades.start({"release": NEW}, actor="ann"))
    assert job.state == "failed"
    assert job.steps[-1].text == ("failed: node-b: not upgraded: signed by key abc, which is not trusted here; "
                                  "stopped there; upgraded: node-a; not tried: node-c; go back with "
                                  "`llmgw ctl upgrade --back`")
    assert [a.version for a in agents] == [NEW, OLD, OLD] and agents[2].asked == []
    job = await ended(plane, await plane.upgrades.start({"release": NEW, "rollback": True}, actor="ann"))
    # node-a is already there and passed over; node-b refuses again: nothing was upgraded by this job to roll back
    assert job.state == "failed" and "upgraded: none" in job.steps[-1].text
    agents[0].version = OLD
    await agents[0].conn.stop()
    await asyncio.wait({agents[0].task}, timeout=10)
    agents[0] = ScriptedAgent(url, "node-a")
    await connected(plane, agents)
    for _ in range(100):  # the old session's end is seen
        if plane.endpoint.sessions["node-a"].register.agent_version == OLD:
            break
        await asyncio.sleep(0.05)
    job = await ended(plane, await plane.upgrades.start({"release": NEW, "rollback": True}, actor="ann"))
    text = [s.text for s in job.steps]
    assert job.state == "failed" and "node-a: sent back to llmgw 1.0.0" in text, text
    assert "the nodes upgraded before (node-a) were sent back to the file they ran before" in text[-1]
    assert agents[0].version == OLD and agents[0].asked[-1].back


async def test_by_rack_upgrades_one_rack_at_a_time(cluster):
    plane, url, agents = cluster
    agents += [ScriptedAgent(url, "node-a", rack="r2"), ScriptedAgent(url, "node-b", rack="r1"),
               ScriptedAgent(url, "node-c", rack="r1")]
    await connected(plane, agents)
    job = await ended(plane, await plane.upgrades.start({"release": NEW, "by": "rack"}, actor="ann"))
    asked = [s.text for s in job.steps if s.text.endswith("asked to upgrade to 1.1.0")]
    assert asked == ["llmgw.io/rack=r1 (node-b, node-c): asked to upgrade to 1.1.0",
                     "node-a: asked to upgrade to 1.1.0"], asked
    assert job.state == "done"


@pytest.mark.parametrize("body, words", [
    ({"release": "9.9.9"}, "signed by key .* which is not trusted here"),
    ({"release": "2.0.0"}, "the mirror holds no release 2.0.0"),
    ({"release": ""}, "release: empty; give the version to upgrade to"),
    ({"release": NEW, "by": "row"}, "by: 'row'; give node"),
    ({"release": NEW, "back": True}, "give a release to upgrade to, or back, not both"),
    ({"release": NEW, "timeout": 0}, "timeout: 0"),
])
async def test_a_refused_upgrade_sends_nothing(cluster, body, words):
    plane, url, agents = cluster
    agents.append(ScriptedAgent(url, "node-a"))
    await connected(plane, agents)
    with pytest.raises(UpgradeError, match=words):
        await plane.upgrades.start(body, actor="ann")
    await asyncio.sleep(0.2)
    assert agents[0].asked == [] and all(j.kind != "upgrade" for j in plane.jobs.select())


async def test_a_node_that_does_not_come_back_stops_it_and_a_second_upgrade_waits_for_the_first(cluster):
    plane, url, agents = cluster
    agents += [ScriptedAgent(url, "node-a", silent=True), ScriptedAgent(url, "node-b")]
    await connected(plane, agents)
    job = await plane.upgrades.start({"release": NEW, "timeout": 1.5}, actor="ann")
    with pytest.raises(UpgradeError, match=f"an upgrade is already running \\({job.id}: ") as refused:
        await plane.upgrades.start({"release": NEW}, actor="bob")
    assert refused.value.kind == "conflict"
    await ended(plane, job)
    assert job.state == "failed"
    assert job.steps[-1].text == ("failed: node-a: not back within 1.5 s (its agent's log says why: `llmgw ctl logs "
                                  "node-a`); stopped there; upgraded: none; not tried: node-b")
    assert agents[1].asked == [] and agents[1].version == OLD


async def test_a_standby_refuses_naming_the_leader(cluster, tmp_path):
    plane, url, agents = cluster
    config = parse_server_config({"agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
                                  "control": {"lease_ttl": "1200ms"}, "mirror": {"url": plane.config.mirror.url}})
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    standby = ControlPlane(config, store, ReplicaSet(), holder="cp-2", standby_hold=0.1)
    try:
        await standby.start()
        await asyncio.sleep(0.3)
        assert not standby.leading
        with pytest.raises(UpgradeError, match="this control plane is a standby; ask the leader, cp-1") as refused:
            await standby.upgrades.start({"release": NEW}, actor="ann")
        assert refused.value.kind == "unavailable"
    finally:
        await standby.stop()
        await store.close()
