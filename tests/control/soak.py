"""A soak test of the control loop: a simulated cluster over the real control-plane code.

The real `Reconciler`, `Inventory`, `Catalog` (on a SQLite store), placement,
preemption and the router's `ReplicaSet` run against simulated agents and a
fake clock. A seeded list of random events (nodes added, silenced and heard
again, connections dropped and made again, engines killed, starts that fail,
models added, scaled and removed, nodes held for maintenance) is played one event a step; after every step
the safety invariants are checked, and every so often the cluster is healed
and left to settle and the liveness ones are checked too:

- no card is ever asked to run two engines at once (on the agents' side, which
  is what a real GPU would feel), and no engine is started on a held node;
- the router only sends to engines that really run and are ready;
- no model is started more often in a minute than its size and the faults
  thrown at it explain;
- once settled: every critical model is placed wherever capacity for it exists,
  no model runs more replicas than its `max`, every engine that runs is known to
  the control plane (nothing leaked, nothing duplicated), and the router's
  replicas are exactly the ready ones.

A failure names the seed, the step and the invariant, and the shortest list of
events found that still fails (a delta-debugging pass over the events).

Run longer by hand: `python -m tests.control.soak --events 20000 --seeds 1-5`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from llmgw.control.agent_events import CRASH_WINDOW
from llmgw.control.catalog import Catalog
from llmgw.control.engine_keys import EngineKeys
from llmgw.control.facility import Hold
from llmgw.control.inventory import Inventory
from llmgw.control.reconciler import NodeUnreachable, Reconciler
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import ENGINES, Clock, control, gpus, register

CLASSES = ("critical", "standard", "opportunistic")
STEP_SECONDS = 2.0  #: fake time between two passes
RESTART_WINDOW = 60.0


class InvariantBroken(AssertionError):
    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name


# ---------------------------------------------------------------------------------------------- events

Event = tuple  # (kind, *args): plain data, so a failing list prints as something to paste back in


def make_events(seed: int, count: int, *, nodes: int, models: int) -> list[Event]:
    """`count` random events; the first ones bring up `nodes` nodes and `models` models."""
    rng = random.Random(seed)
    events: list[Event] = []
    node_ids = [f"n{i:03d}" for i in range(nodes)]
    for node_id in node_ids:
        events.append(("add_node", node_id, rng.choice((0, 2, 4, 8, 8))))
    names = [f"m{i:02d}" for i in range(models)]
    for name in names:
        events.append(("add_model", name, rng.choice(CLASSES), rng.choice((1, 1, 2, 4)),
                       rng.choice((0, 1, 1, 2)), rng.choice((1, 2, 3))))
    spare = nodes
    while len(events) < count:
        r = rng.random()
        node_id = rng.choice(node_ids)
        name = rng.choice(names)
        if r < 0.30:
            events.append(("wait", rng.choice((1, 2, 5, 10, 20))))
        elif r < 0.40:
            events.append(("kill", node_id, rng.randrange(8)))
        elif r < 0.48:
            events.append(("silence", node_id))
        elif r < 0.58:
            events.append(("hear", node_id))
        elif r < 0.63:
            events.append(("drop", node_id))
        elif r < 0.70:
            events.append(("reconnect", node_id))
        elif r < 0.75:
            events.append(("flaky", name, rng.random() < 0.5))
        elif r < 0.85:
            events.append(("scale", name, rng.choice((0, 1, 1, 2)), rng.choice((1, 2, 3, 4))))
        elif r < 0.88:
            events.append(("add_model", name, rng.choice(CLASSES), rng.choice((1, 2, 4, 8)),
                           rng.choice((0, 1, 2)), rng.choice((1, 2, 3))))
        elif r < 0.90:
            events.append(("remove_model", name))
        elif r < 0.91:
            events.append(("hold", node_id, rng.random() < 0.5))
        elif r < 0.92:
            node_ids.append(f"n{spare:03d}")
            events.append(("add_node", node_ids[-1], rng.choice((2, 4, 8))))
            spare += 1
        else:
            events.append(("settle",))
    return events


# ---------------------------------------------------------------------------------------------- the agents


@attrs.define
class SimShard:
    id: str
    model: str
    gpus: tuple[int, ...]
    state: str  # starting, ready, stopping
    due: float  # when it becomes ready (or fails), or stops
    fails: bool = False
    ready_since: float = 0.0
    port: int = 0


@attrs.define
class SimAgent:
    node_id: str
    cards: int
    shards: dict[str, SimShard] = attrs.Factory(dict)
    connected: bool = False  #: its connection is up
    silent: bool = False  #: it hears and says nothing (a hung agent, a one-way partition), its connection up
    inbox: list[Any] = attrs.Factory(list)  #: what was sent to it while silent


class SimCluster:
    """The simulated agents, the control plane they talk to, and the invariants."""

    def __init__(self, store, seed: int) -> None:
        self.rng = random.Random(seed * 7919 + 1)
        self.clock = Clock()
        self.agents: dict[str, SimAgent] = {}
        self.replicas = ReplicaSet()
        self.inventory = Inventory(clock=self.clock)
        self.catalog = Catalog([], store, ENGINES)
        self.rec = Reconciler(control(), self.catalog, self.inventory, self, self.replicas, EngineKeys(b"k" * 32),
                              engines=ENGINES, clock=self.clock, wall_clock=lambda: 1.7e9 + self.clock.now)
        self.flaky: set[str] = set()
        self.ports = 20000
        #: model -> when each StartShard for it was sent, and when each of its engines ended by a fault
        self.starts: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.faults: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.maxima: dict[str, int] = {}  #: the largest `max` each model had in the last window
        self.seq = 0

    # ------------------------------------------------------------ the link the reconciler sends on

    async def send(self, node_id: str, message: Any) -> None:
        agent = self.agents.get(node_id)
        if agent is None or not agent.connected:
            raise NodeUnreachable(f"{node_id} is not connected")
        if agent.silent:
            agent.inbox.append(message)
        else:
            self._receive(agent, message)

    def _receive(self, agent: SimAgent, message: Any) -> None:
        now = self.clock.now
        if isinstance(message, w.StartShard):
            if message.shard_id in agent.shards:
                return  # a repeated start: the agent keeps the one it has
            if f"node:{agent.node_id}" in self.rec.holds:
                raise InvariantBroken("start on a held node", f"{agent.node_id}: {message.shard_id} ({message.model})")
            held = {g: s.id for s in agent.shards.values() for g in s.gpus}
            twice = {g: held[g] for g in message.gpus if g in held}
            if twice:
                raise InvariantBroken("card held twice", f"{agent.node_id}: {message.shard_id} ({message.model}) "
                                                         f"asked for cards {sorted(twice)} held by "
                                                         f"{sorted(set(twice.values()))}")
            if any(g >= agent.cards for g in message.gpus):
                raise InvariantBroken("card that does not exist", f"{agent.node_id} has {agent.cards}: "
                                                                  f"{message.gpus}")
            self.starts[message.model].append(now)
            agent.shards[message.shard_id] = SimShard(
                message.shard_id, message.model, tuple(message.gpus), "starting", now + self.rng.choice((0, 2, 4, 8)),
                fails=message.model in self.flaky)
        elif isinstance(message, w.StopShard):
            shard = agent.shards.get(message.shard_id)
            if shard is None:
                self._say(agent, w.ShardStatus(shard_id=message.shard_id, state="stopped",
                                               command_id=message.command_id))
            elif shard.state != "stopping":
                shard.state, shard.due = "stopping", now + self.rng.choice((0, 1, 3))

    def _say(self, agent: SimAgent, message: Any) -> None:
        self.rec.handle(agent.node_id, message)

    # ------------------------------------------------------------ time passing

    async def step(self, seconds: float = STEP_SECONDS) -> None:
        self.clock.advance(seconds)
        now = self.clock.now
        for agent in self.agents.values():
            if not agent.connected or agent.silent:
                continue
            for shard in list(agent.shards.values()):
                if shard.due > now:
                    continue
                if shard.state == "starting" and shard.fails:
                    del agent.shards[shard.id]
                    self._fault(shard.model)
                    self._say(agent, w.ShardStatus(shard_id=shard.id, state="failed", message="CUDA out of memory"))
                elif shard.state == "starting":
                    self.ports += 1
                    shard.state, shard.ready_since, shard.port = "ready", now, self.ports
                    self._say(agent, w.ShardStatus(shard_id=shard.id, state="ready", port=shard.port))
                elif shard.state == "stopping":
                    del agent.shards[shard.id]
                    self._say(agent, w.ShardStatus(shard_id=shard.id, state="stopped"))
            self._heartbeat(agent)
        await self.rec.reconcile_once()
        self._check_safety()

    def _heartbeat(self, agent: SimAgent) -> None:
        self.seq += 1
        self._say(agent, w.Heartbeat(seq=self.seq, shards=tuple(
            w.ShardSummary(shard_id=s.id, state=s.state) for s in agent.shards.values())))

    def _fault(self, model: str) -> None:
        self.faults[model].append(self.clock.now)

    def _register(self, agent: SimAgent) -> None:
        agent.connected, agent.silent, agent.inbox = True, False, []
        running = tuple(w.RunningShard(shard_id=s.id, model=s.model, engine="vllm", gpus=s.gpus, port=s.port,
                                       state="ready" if s.state == "ready" else "starting")
                        for s in agent.shards.values() if s.state != "stopping")
        self.rec.node_registered(register(agent.node_id, gpu=gpus(agent.cards), shards=running),
                                 peer_host="127.0.0.1")

    # ------------------------------------------------------------ events

    async def play(self, event: Event) -> None:
        kind, *args = event
        agent = self.agents.get(args[0]) if args and isinstance(args[0], str) else None
        if kind == "add_node":
            node_id, cards = args
            if node_id not in self.agents:
                self.agents[node_id] = agent = SimAgent(node_id, cards)
                self._register(agent)
        elif kind == "wait":
            for _ in range(max(1, int(args[0] / STEP_SECONDS))):
                await self.step()
            return
        elif kind == "kill" and agent is not None and agent.connected and not agent.silent:
            # Only engines past the crash window: a quick death counts as a failed start, and parking
            # a model for failing is not what this soak is about.
            ready = sorted(s.id for s in agent.shards.values()
                           if s.state == "ready" and self.clock.now - s.ready_since > CRASH_WINDOW)
            if ready:
                shard = agent.shards.pop(ready[args[1] % len(ready)])
                self._fault(shard.model)
                self._say(agent, w.ShardStatus(shard_id=shard.id, state="exited", exit_code=-9,
                                               message="killed by signal 9"))
        elif kind == "silence" and agent is not None and agent.connected:
            agent.silent = True
        elif kind == "hear" and agent is not None and agent.connected and agent.silent:
            agent.silent = False
            inbox, agent.inbox = agent.inbox, []
            for message in inbox:
                self._receive(agent, message)
            self._heartbeat(agent)
        elif kind == "drop" and agent is not None and agent.connected:
            agent.connected, agent.silent = False, False
            agent.inbox = []  # what was on the wire is lost with the connection
            self.rec.node_disconnected(agent.node_id, "connection reset")
        elif kind == "reconnect" and agent is not None and not agent.connected:
            self._register(agent)
        elif kind == "hold" and agent is not None:
            domain = f"node:{agent.node_id}"
            if args[1]:
                self.rec.holds = {**self.rec.holds, domain: Hold(domain, "maintenance")}
            else:
                self.rec.holds = {d: h for d, h in self.rec.holds.items() if d != domain}
        elif kind == "flaky":
            name, on = args
            (self.flaky.add if on else self.flaky.discard)(name)
        elif kind == "add_model":
            name, model_class, cards, low, high = args
            await self.catalog.add(model_spec(name, model_class, cards, low, high), actor="soak", replace=True,
                                   audit=False)
            self.maxima[name] = max(self.maxima.get(name, 0), high)
        elif kind == "scale" and name_known(self.catalog, args[0]):
            name, low, high = args
            low = min(low, high)
            # max first when it shrinks below min, min first when it grows: each step a valid scaling
            await self.catalog.scale(name, min=low, max=high, actor="soak", audit=False)
            self.maxima[name] = max(self.maxima.get(name, 0), high)
        elif kind == "remove_model" and name_known(self.catalog, args[0]):
            await self.catalog.remove(args[0], actor="soak", audit=False)
        elif kind == "settle":
            await self.settle()
            return
        await self.step()

    async def settle(self, passes: int = 30) -> None:
        """Heal everything (every node heard and connected, no start failing), let the loop converge, and
        check what must hold once it has."""
        self.flaky.clear()
        for agent in self.agents.values():
            if not agent.connected:
                self._register(agent)
            elif agent.silent:
                await self.play(("hear", agent.node_id))
        for _ in range(passes):
            await self.step()
        self._check_settled()

    # ------------------------------------------------------------ invariants

    def _check_safety(self) -> None:
        # The router sends only to engines that run and are ready, where the control plane put them.
        for model in self.catalog.names():
            for replica in self.replicas.replicas_for(model):
                if replica.source != "control":
                    continue
                where = [a for a in self.agents.values() if replica.id in a.shards]
                if not where or where[0].shards[replica.id].state not in ("ready", "stopping"):
                    raise InvariantBroken("router sends to an engine not running",
                                          f"{model}: {replica.id} ({[a.node_id for a in where]})")
        # No model is restarted beyond what its size and the faults thrown at it explain.
        now = self.clock.now
        for model, times in self.starts.items():
            while times and times[0] < now - RESTART_WINDOW:
                times.popleft()
            faults = self.faults[model]
            while faults and faults[0] < now - RESTART_WINDOW:
                faults.popleft()
            bound = 2 * self.maxima.get(model, 1) + 2 * len(faults) + 4
            if len(times) > bound:
                raise InvariantBroken("restarted too often",
                                      f"{model}: {len(times)} starts in {RESTART_WINDOW:g} s "
                                      f"(max {self.maxima.get(model)}, {len(faults)} faults; bound {bound})")

    def _check_settled(self) -> None:
        live = {r.id: r for r in self.rec.records.values() if r.live}
        for agent in self.agents.values():
            for shard in agent.shards.values():
                if shard.state != "stopping" and shard.id not in live:
                    raise InvariantBroken("engine leaked", f"{agent.node_id} runs {shard.id} ({shard.model}), "
                                                           f"which the control plane does not count")
        for rec in live.values():
            agent = self.agents.get(rec.node)
            if agent is None or rec.id not in agent.shards:
                raise InvariantBroken("ghost replica", f"{rec.id} ({rec.model}) counted on {rec.node}, not running")
        for cm in self.catalog.cluster_models():
            mine = [r for r in live.values() if r.model == cm.name]
            if len(mine) > cm.scaling.max:
                raise InvariantBroken("over max", f"{cm.name}: {len(mine)} replicas, max {cm.scaling.max}")
            ready = {r.id for r in mine if r.state == "ready"}
            routed = {r.id for r in self.replicas.replicas_for(cm.name) if r.source == "control"}
            if routed != ready:
                raise InvariantBroken("router differs from the ready replicas",
                                      f"{cm.name}: routed {sorted(routed)}, ready {sorted(ready)}")
            if cm.model_class == "critical" and cm.scaling.min >= 1 and not mine:
                st = self.rec.models.get(cm.name)
                if st is not None and st.parked:
                    continue
                room = self._room_for(cm)
                if room:
                    raise InvariantBroken("critical model not placed",
                                          f"{cm.name} needs {cards_of(cm)} cards; {room} has room "
                                          f"(explain: {st.decision.summary() if st and st.decision else '-'})")

    def _room_for(self, cm) -> str:
        """A node with room for one replica of the critical model `cm`, counting only what other critical
        models hold there (everything else can be preempted), or ''."""
        need = cards_of(cm)
        for node in self.inventory.nodes():
            if node.lost or not node.connected or f"node:{node.id}" in self.rec.holds:
                continue
            held = sum(len(r.gpus) for r in self.rec.records.values()
                       if r.node == node.id and not r.retiring and r.model != cm.name
                       and (other := self.catalog.get(r.model)) is not None and other.model_class == "critical")
            if self.agents[node.id].cards - held >= need:
                return node.id
        return ""


def model_spec(name: str, model_class: str, cards: int, low: int, high: int) -> dict[str, Any]:
    return {"name": name, "engine": "vllm", "class": model_class, "profiles": [{"name": "d", "gpus": cards}],
            "scaling": {"min": min(low, high), "max": high}}


def cards_of(cm) -> int:
    return cm.config.profiles[0].gpus


def name_known(catalog: Catalog, name: str) -> bool:
    return catalog.get(name) is not None


# ---------------------------------------------------------------------------------------------- running


@attrs.frozen
class Failure:
    seed: int
    step: int
    invariant: str
    message: str


async def run_events(seed: int, events: Sequence[Event]) -> Failure | None:
    """Play `events` on a fresh cluster; the first invariant broken, or None."""
    folder = tempfile.mkdtemp(prefix="llmgw-soak-")
    store = await open_store(f"sqlite:///{folder}/store.db")
    try:
        cluster = SimCluster(store, seed)
        for index, event in enumerate(events):
            try:
                await cluster.play(event)
            except InvariantBroken as broken:
                return Failure(seed, index, broken.name, str(broken))
        try:
            await cluster.settle()
        except InvariantBroken as broken:
            return Failure(seed, len(events), broken.name, str(broken))
        return None
    finally:
        await store.close()
        shutil.rmtree(folder, ignore_errors=True)


async def shrink(seed: int, events: list[Event], failure: Failure,
                 budget: float = 120.0) -> list[Event]:
    """The shortest list found (delta debugging, within `budget` seconds) that breaks the same invariant."""
    deadline = time.monotonic() + budget
    events = list(events[:failure.step + 1])

    async def still_fails(candidate: list[Event]) -> bool:
        found = await run_events(seed, candidate)
        return found is not None and found.invariant == failure.invariant

    chunk = max(1, len(events) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        shrunk, start = False, 0
        while start < len(events) and time.monotonic() < deadline:
            candidate = events[:start] + events[start + chunk:]
            if candidate and await still_fails(candidate):
                events, shrunk = candidate, True
            else:
                start += chunk
        if not shrunk:
            chunk //= 2
    return events


async def soak(seed: int, count: int, *, nodes: int, models: int,
               shrink_budget: float = 120.0) -> tuple[Failure | None, list[Event]]:
    events = make_events(seed, count, nodes=nodes, models=models)
    failure = await run_events(seed, events)
    if failure is None:
        return None, events
    return failure, await shrink(seed, events, failure, shrink_budget)


def report(failure: Failure, events: Sequence[Event]) -> str:
    lines = [f"soak seed {failure.seed} broke '{failure.invariant}' at event {failure.step}: {failure.message}",
             f"the shortest list found that still breaks it ({len(events)} events):"]
    lines += [f"    {event!r}," for event in events]
    lines.append("replay: asyncio.run(tests.control.soak.run_events(SEED, [the events above]))")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.control.soak")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--seeds", default="1", help="a seed, or a range such as 1-10")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--models", type=int, default=30)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # thousands of passes say what they do; the invariants are what counts
    low, _, high = args.seeds.partition("-")
    status = 0
    for seed in range(int(low), int(high or low) + 1):
        began = time.monotonic()
        failure, events = asyncio.run(soak(seed, args.events, nodes=args.nodes, models=args.models))
        took = time.monotonic() - began
        if failure is None:
            out(f"seed {seed}: {args.events} events on {args.nodes} nodes, {args.models} models: "
                f"nothing broken ({took:.1f} s)")
        else:
            out(report(failure, events))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
