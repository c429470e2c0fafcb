"""The control planes' part of `ctl upgrade`, in process: two control planes on one store, each with its own
program file (a small stand-in zipapp) and a restart that stops it and starts a new one from what that file says
it is (as `llmgw server` execs itself; the real processes are in test_upgrade_cluster_slow.py). Scripted agents
(test_upgrade_job.py) stand in for the nodes."""

from __future__ import annotations

import asyncio
import io

import pytest
from aiohttp import web
from test_upgrade_job import NEW, OLD, ScriptedAgent
from upgrade_helpers import free_port, make_key, release_folder, tiny_zipapp

from llmgw.agent.self_upgrade import PREVIOUS_SUFFIX, zipapp_version
from llmgw.config.load import parse_server_config
from llmgw.control.service import ControlPlane
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.release.store import add_release
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store


class Planes:
    """cp-1 and cp-2 on one SQLite store; `restart(name)` is what `llmgw server` does once its program changed."""

    def __init__(self, tmp_path, mirror: str, public: str, stranger_public: str) -> None:
        self.tmp = tmp_path
        self.mirror = mirror
        self.keys = {"cp-1": public, "cp-2": public}
        self.stranger_public = stranger_public
        self.ports = {n: free_port() for n in ("cp-1", "cp-2")}
        self.programs = {n: tiny_zipapp(tmp_path / n / "llmgw.pyz", OLD) for n in ("cp-1", "cp-2")}
        self.planes: dict[str, ControlPlane] = {}
        self.stores = []
        self.restarts = {"cp-1": True, "cp-2": True}  #: False: the file is replaced, the process never restarts
        self.tasks: set[asyncio.Task] = set()

    @property
    def urls(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports.values()]

    async def start(self, name: str) -> ControlPlane:
        config = parse_server_config({
            "agent_listen": f"127.0.0.1:{self.ports[name]}", "agent_insecure": True,
            "control": {"lease_ttl": "6s", "reconcile_interval": "200ms"},
            "mirror": {"url": self.mirror}, "releases": {"trusted_keys": [self.keys[name]]}})
        store = await open_store(f"sqlite:///{self.tmp}/store.db")
        self.stores.append(store)
        plane = ControlPlane(config, store, ReplicaSet(), holder=name, heartbeat_interval=0.2, standby_hold=0.5)
        plane.upgrades.version = zipapp_version(self.programs[name])
        plane.upgrades.program = lambda: self.programs[name]
        plane.upgrades.restart = lambda why: self._restart(name)
        plane.upgrades.watch_interval = 0.05
        await plane.start()
        self.planes[name] = plane
        return plane

    def _restart(self, name: str) -> None:
        if self.restarts[name]:
            task = asyncio.get_running_loop().create_task(self._again(name))
            self.tasks.add(task)

    async def _again(self, name: str) -> None:
        await self.planes[name].stop()
        await asyncio.sleep(0.1)  # a process starting again
        await self.start(name)

    async def stop(self) -> None:
        for task in self.tasks:
            await asyncio.wait({task}, timeout=10)
        for plane in self.planes.values():
            await plane.stop()
        for store in self.stores:
            await store.close()


@pytest.fixture
async def planes(tmp_path):
    private, trust, public = make_key(tmp_path / "keys")
    _, _, stranger_public = make_key(tmp_path / "stranger")
    root = tmp_path / "mirror"
    root.mkdir()
    add_release(root, release_folder(tmp_path / "rel", NEW, private), trust)
    runner = web.AppRunner(build_file_app(Layout(root)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    cluster = Planes(tmp_path, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", public,
                     stranger_public)
    agents: list[ScriptedAgent] = []
    yield cluster, agents
    try:
        async with asyncio.timeout(TEARDOWN_S):
            for a in agents:
                await a.stop()
            await cluster.stop()
            await runner.cleanup()
    except TimeoutError:
        # Seen once in a whole CI run (2 December 2026): this teardown waited without end. Fail saying what
        # every task still waits on, instead of holding the run until its limit.
        raise AssertionError(f"the planes did not stop within {TEARDOWN_S} s; tasks still waiting:\n"
                             + pending_tasks()) from None


#: Seconds the fixture's teardown may take: it takes well under one.
TEARDOWN_S = 60


def pending_tasks() -> str:
    """Each task of this loop that has not finished, with where it waits."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task() and not task.done():
            task.print_stack(limit=8, file=out)
    return out.getvalue()


async def two_planes_and_an_agent(cluster: Planes, agents: list, upgraded: bool = False) -> ControlPlane:
    """cp-1 leading, cp-2 its standby, node-a; `upgraded`: all three on NEW, each with OLD as the file before."""
    if upgraded:
        for name, program in cluster.programs.items():
            tiny_zipapp(program, NEW)
            tiny_zipapp(program.with_name(program.name + PREVIOUS_SUFFIX), OLD)
    leader = await cluster.start("cp-1")
    assert await leader.leadership.wait_leading(3)
    standby = await cluster.start("cp-2")
    assert not standby.leading
    agent = ScriptedAgent(cluster.urls, "node-a")
    if upgraded:
        agent.version, agent.before = NEW, OLD
    agents.append(agent)
    for _ in range(200):
        if "node-a" in leader.endpoint.sessions:
            break
        await asyncio.sleep(0.05)
    return leader


async def job_ended(cluster: Planes, job_id: str, timeout: float = 30):
    """The job as whichever control plane leads has it, once it ended."""
    for _ in range(int(timeout / 0.1)):
        for plane in list(cluster.planes.values()):
            job = plane.jobs.get(job_id) if plane.leading else None
            if job is not None and not job.active:
                return plane, job
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} did not end: " + "; ".join(
        f"{n}: {[s.text for s in p.jobs.get(job_id).steps] if p.jobs.get(job_id) else None}"
        for n, p in cluster.planes.items()))


async def test_standby_then_leader_handing_its_lease_over_then_agents_the_new_leader_carrying_the_job_on(planes):
    cluster, agents = planes
    leader = await two_planes_and_an_agent(cluster, agents)
    job = await leader.upgrades.start({"release": NEW}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    steps = [s.text for s in ended.steps]
    assert ended.state == "done", steps
    assert plane.holder == "cp-2" and ended.id == job.id and ended.by == "ann"
    assert steps[0] == "ann asked to upgrade the cluster to 1.1.0, one node at a time"
    standby_asked = steps.index("cp-2 (standby, llmgw 1.0.0): asked to upgrade to 1.1.0")
    standby_back = next(i for i, s in enumerate(steps) if s.startswith("cp-2: back as a standby with llmgw 1.1.0"))
    handing = next(i for i, s in enumerate(steps) if s.startswith("cp-1: hands its lease to cp-2 (upgraded)"))
    took = next(i for i, s in enumerate(steps) if s.startswith("cp-2 leads now: cp-1 handed its lease over (taken"))
    leader_back = steps.index("cp-1: back as a standby with llmgw 1.1.0 (was 1.0.0)")
    node = next(i for i, s in enumerate(steps) if s.startswith("node-a: back with llmgw 1.1.0 (was 1.0.0)"))
    assert standby_asked < standby_back < handing < took < leader_back < node, steps
    assert steps[-1] == "done: the control planes and 1 node(s) upgraded; the agents run llmgw 1.1.0"
    # handed over, not lapsed: taken well within the 6 s TTL of the lease it gave up
    assert float(steps[took].split("(taken ")[1].split(" s")[0]) < 2.0
    assert [zipapp_version(cluster.programs[n]) for n in ("cp-1", "cp-2")] == [NEW, NEW]
    assert all(p.upgrades.version == NEW for p in cluster.planes.values())
    assert cluster.planes["cp-2"].leading and not cluster.planes["cp-1"].leading
    # the standby shows the job as the store recorded it (what `ctl upgrade` through it follows)
    shown = await cluster.planes["cp-1"].upgrades.recorded(job.id)
    assert shown is not None and shown.state == "done" and [s.text for s in shown.steps] == steps


async def test_a_standby_that_does_not_trust_the_key_refuses_and_nothing_changes(planes):
    cluster, agents = planes
    cluster.keys["cp-2"] = cluster.stranger_public  # the release's key is not among cp-2's
    leader = await two_planes_and_an_agent(cluster, agents)
    job = await leader.upgrades.start({"release": NEW}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    assert plane.holder == "cp-1" and ended.state == "failed"
    last = ended.steps[-1].text
    assert last.startswith("failed: control plane cp-2: release 1.1.0: refused: ") and "not trusted" in last, last
    assert last.endswith("stopped there, before this leader and any agent; upgraded: none")
    assert [zipapp_version(cluster.programs[n]) for n in ("cp-1", "cp-2")] == [OLD, OLD]
    assert leader.leading and agents[0].asked == [] and agents[0].version == OLD


async def test_a_standby_that_does_not_come_back_stops_it_and_rollback_puts_its_file_back(planes):
    cluster, agents = planes
    cluster.restarts["cp-2"] = False  # its file is replaced, but it never starts again
    leader = await two_planes_and_an_agent(cluster, agents)
    job = await leader.upgrades.start({"release": NEW, "timeout": 1, "rollback": True}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    steps = [s.text for s in ended.steps]
    assert plane.holder == "cp-1" and ended.state == "failed"
    assert "cp-2: sent back to llmgw 1.0.0" in steps, steps
    assert steps[-1] == ("failed: control plane cp-2: it replaced its file but not back within 1 s (its log says "
                         "why: `journalctl -u llmgw-server` on its machine); stopped there, before this leader and "
                         "any agent; the control planes upgraded (cp-2) were sent back to the file they ran before")
    assert zipapp_version(cluster.programs["cp-2"]) == OLD and zipapp_version(cluster.programs["cp-1"]) == OLD
    assert agents[0].asked == []


async def test_a_control_plane_that_cannot_replace_itself_is_passed_over_in_words(planes):
    cluster, agents = planes
    leader = await two_planes_and_an_agent(cluster, agents)
    leader.upgrades.restart = None  # not started by `llmgw server` (a source checkout's test harness, say)
    cluster.planes["cp-2"].upgrades.restart = None
    job = await leader.upgrades.start({"release": NEW}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    steps = [s.text for s in ended.steps]
    assert plane is leader and ended.state == "done", steps
    assert ("cp-2 (standby): this control plane was not started by `llmgw server`, so it cannot start itself "
            "again: passed over; upgrade it yourself (`llmgw self-upgrade`, docs/upgrades.md)") in steps
    assert ("cp-1 (the leader): this control plane was not started by `llmgw server`, so it cannot start itself "
            "again: not replaced; upgrade it yourself (`llmgw self-upgrade`, docs/upgrades.md)") in steps
    assert agents[0].version == NEW


async def test_back_goes_agents_then_standby_then_leader_handing_its_lease_over_the_new_leader_ending_it(planes):
    cluster, agents = planes
    leader = await two_planes_and_an_agent(cluster, agents, upgraded=True)
    job = await leader.upgrades.start({"back": True}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    steps = [s.text for s in ended.steps]
    assert ended.state == "done", steps
    assert plane.holder == "cp-2" and ended.id == job.id
    assert steps[0] == "ann asked to upgrade the cluster back to the file before, one node at a time"
    checked = steps.index("control planes checked: cp-1 (the leader): back to llmgw 1.0.0; cp-2 (standby): back to "
                          "llmgw 1.0.0; the agents go back first, then the standbys, then this leader hands its "
                          "lease to one that went back")
    node = next(i for i, s in enumerate(steps) if s.startswith("node-a: back with llmgw 1.0.0 (was 1.1.0)"))
    standby_asked = steps.index("cp-2 (standby, llmgw 1.1.0): asked to go back to the file before")
    standby_back = next(i for i, s in enumerate(steps) if s.startswith("cp-2: back as a standby with llmgw 1.0.0"))
    handing = next(i for i, s in enumerate(steps) if s.startswith("cp-1: hands its lease to cp-2 (went back)"))
    took = next(i for i, s in enumerate(steps) if s.startswith("cp-2 leads now: cp-1 handed its lease over (taken"))
    leader_back = steps.index("cp-1: back as a standby with llmgw 1.0.0 (was 1.1.0)")
    assert checked < node < standby_asked < standby_back < handing < took < leader_back, steps
    assert steps[-1] == ("done: 1 node(s) and the control planes went back; the control planes run llmgw 1.0.0; "
                         "the agents run llmgw 1.0.0")
    assert float(steps[took].split("(taken ")[1].split(" s")[0]) < 2.0  # handed over, not lapsed (6 s TTL)
    assert [zipapp_version(cluster.programs[n]) for n in ("cp-1", "cp-2")] == [OLD, OLD]
    # the upgrade is kept as the file before, to go forward again (as `llmgw self-upgrade --back` leaves it)
    assert [zipapp_version(p.with_name(p.name + PREVIOUS_SUFFIX)) for p in cluster.programs.values()] == [NEW, NEW]
    assert all(p.upgrades.version == OLD for p in cluster.planes.values())
    assert agents[0].version == OLD and [a.back for a in agents[0].asked] == [True]
    assert cluster.planes["cp-2"].leading and not cluster.planes["cp-1"].leading


async def test_back_with_a_control_plane_that_has_no_file_before_refuses_in_words_and_nothing_moves(planes):
    cluster, agents = planes
    leader = await two_planes_and_an_agent(cluster, agents, upgraded=True)
    program = cluster.programs["cp-2"]
    program.with_name(program.name + PREVIOUS_SUFFIX).unlink()  # cp-2 was put in place by hand, not upgraded
    job = await leader.upgrades.start({"back": True}, actor="ann")
    plane, ended = await job_ended(cluster, job.id)
    assert plane is leader and ended.state == "failed"
    assert ended.steps[-1].text == (
        f"failed: cp-2 (standby): there is no llmgw.pyz.previous beside {program}: this machine's llmgw was not "
        "upgraded by llmgw, so there is nothing to go back to; nothing was sent back (no agent, no control plane): "
        "put the file it ran before back on it by hand (docs/upgrades.md), or upgrade forward instead")
    assert [zipapp_version(cluster.programs[n]) for n in ("cp-1", "cp-2")] == [NEW, NEW]
    assert leader.leading and agents[0].asked == [] and agents[0].version == NEW
