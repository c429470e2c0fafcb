"""Preemption converges: a replica stopped for a higher class stays off its cards while that model waits,
each model preempts at most once per interval, and a preemption that cannot help stops nothing."""

from __future__ import annotations

from llmgw.control.explain import explain, explain_text

from .conftest import Harness, control, gpus, model, register

CHEAP = {"name": "cheap", "engine": "vllm", "class": "opportunistic", "profiles": [{"name": "d", "gpus": 2}],
         "scaling": {"min": 1, "max": 1}}
VIP = {"name": "vip", "engine": "vllm", "class": "critical", "profiles": [{"name": "d", "gpus": 2}],
       "scaling": {"min": 1, "max": 1}}


class Agent:
    """A quick agent: every stop is confirmed and every start is ready by the next pass (or fails, when told)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.stops: list[str] = []  # every shard stopped, in order
        self.starts: list[str] = []  # every shard started, in order
        self.failing: set[str] = set()  # models whose starts fail

    def answer(self) -> None:
        for node_id, msg in self.h.agents.stops():
            self.stops.append(msg.shard_id)
            self.h.status(node_id, msg.shard_id, "stopped")
        for node_id, msg in self.h.agents.starts():
            self.starts.append(msg.shard_id)
            if msg.model in self.failing:
                self.h.status(node_id, msg.shard_id, "failed", message="CUDA error: out of memory")
            else:
                self.h.status(node_id, msg.shard_id, "ready", port=self.h.port_for(msg))

    async def passes(self, n: int, seconds: float = 0.2) -> None:
        for _ in range(n):
            await self.h.tick(seconds)
            self.answer()


def running(h: Harness, name: str) -> list[str]:
    return [r.id for r in h.rec.records.values() if r.model == name and r.live]


async def _full_node(sqlite_store, **config) -> tuple[Harness, Agent]:
    """One node, both its cards held by a ready opportunistic replica."""
    h = Harness([], store=sqlite_store, config=control(**config) if config else None)
    agent = Agent(h)
    await h.catalog.add(CHEAP, actor="test")
    h.connect(register("gpu-1", gpu=gpus(2)))
    await agent.passes(1)
    assert len(running(h, "cheap")) == 1
    return h, agent


async def test_a_critical_model_takes_the_cards_within_three_passes_and_the_victim_waits_then_returns(
        sqlite_store):
    h, agent = await _full_node(sqlite_store)
    [cheap] = running(h, "cheap")
    await h.catalog.add(VIP, actor="test")
    for passes in range(1, 4):
        await agent.passes(1)
        if running(h, "vip"):
            break
    assert running(h, "vip") and passes <= 3
    assert agent.stops == [cheap]

    info = explain(h.rec, "cheap")
    assert info["status"] == "unplaced"
    assert info["reason"] == ("waiting: its cards were taken for critical model vip (on gpu-1); "
                              "it is placed again when room frees")
    assert explain_text(info).startswith(
        "cheap (opportunistic, added at run time): unplaced\n"
        "  waiting: its cards were taken for critical model vip (on gpu-1); it is placed again when room frees\n")
    assert ("gpu-1: waiting: its cards were taken for critical model vip"
            in explain(h.rec, "cheap")["next_placement"]["rejections"])

    # Fifty more passes: the one preemption stays the only one, and nothing else starts or stops.
    started = len(agent.starts)
    await agent.passes(50)
    assert agent.stops == [cheap] and len(agent.starts) == started
    assert len(running(h, "vip")) == 1 and running(h, "cheap") == []

    # The room frees: the critical model goes, and the opportunistic one comes back on its cards.
    await h.catalog.remove("vip", actor="test")
    await agent.passes(3)
    [back] = running(h, "cheap")
    assert back != cheap and h.rec.records[back].gpus == (0, 1)
    assert explain(h.rec, "cheap")["status"] in ("ready", "starting")


async def test_a_critical_model_that_fails_to_start_does_not_hand_the_cards_back_and_forth(sqlite_store):
    # Its start fails twice (a back-off between), then succeeds: the victim is stopped once, and not started
    # again on the cards meanwhile.
    h, agent = await _full_node(sqlite_store, backoff=(5, 5), park_after=5)
    [cheap] = running(h, "cheap")
    agent.failing.add("vip")
    await h.catalog.add(VIP, actor="test")
    await agent.passes(40, seconds=0.5)
    assert agent.stops == [cheap]
    assert running(h, "cheap") == []
    info = explain(h.rec, "cheap")
    assert "its cards were taken for critical model vip" in info["reason"]
    assert [s for s in agent.starts if s.startswith("cheap")] == [cheap]  # never started again

    agent.failing.clear()
    await agent.passes(12, seconds=0.5)
    assert len(running(h, "vip")) == 1
    assert agent.stops == [cheap]


async def test_a_parked_critical_model_lets_its_victim_back(sqlite_store):
    h, agent = await _full_node(sqlite_store, backoff=(1, 1), park_after=2)
    [cheap] = running(h, "cheap")
    agent.failing.add("vip")
    await h.catalog.add(VIP, actor="test")
    await agent.passes(10, seconds=1)
    assert explain(h.rec, "vip")["status"] == "parked"
    [back] = running(h, "cheap")
    assert back != cheap
    assert agent.stops == [cheap]


async def test_a_preemption_that_would_not_make_room_stops_nothing(sqlite_store):
    # vip needs both cards; one is held by another critical model, which is never stopped.
    h = Harness([
        model("cheap", engine="vllm", profiles=[{"name": "d", "gpus": 1}], **{"class": "opportunistic"}),
        model("core", engine="vllm", profiles=[{"name": "d", "gpus": 1}], **{"class": "critical"}),
    ], store=sqlite_store)
    agent = Agent(h)
    h.connect(register("gpu-1", gpu=gpus(2)))
    await agent.passes(1)
    await h.catalog.add(VIP, actor="test")
    await agent.passes(5)
    assert agent.stops == []
    info = explain(h.rec, "vip")
    assert info["status"] == "unplaced" and info["last_placement"]["preempts"] == []
    assert "gpu-1: needs 2 free GPUs, has 0" in info["last_placement"]["rejections"]
    assert len(running(h, "cheap")) == 1


async def test_a_replica_being_stopped_is_chosen_once(sqlite_store):
    # Two critical models want the same two cards: the first stops the opportunistic replica; the second
    # stops nothing, since what is already being stopped is the first one's.
    h, agent = await _full_node(sqlite_store)
    [cheap] = running(h, "cheap")
    await h.catalog.add(VIP, actor="test")
    await h.catalog.add({**VIP, "name": "vip-b"}, actor="test")
    await h.tick(1)
    assert [m.shard_id for _, m in h.agents.stops()] == [cheap]
    assert explain(h.rec, "vip")["last_placement"]["preempts"] == [cheap]
    assert explain(h.rec, "vip-b")["last_placement"]["preempts"] == []


async def test_a_model_preempts_at_most_once_per_interval(sqlite_store):
    h = Harness([], store=sqlite_store)
    agent = Agent(h)
    await h.catalog.add({**CHEAP, "profiles": [{"name": "d", "gpus": 1}], "scaling": {"min": 2, "max": 2}},
                        actor="test")
    h.connect(register("gpu-1", gpu=gpus(2)))
    await agent.passes(1)
    assert len(running(h, "cheap")) == 2
    await h.catalog.add({**VIP, "profiles": [{"name": "d", "gpus": 1}], "scaling": {"min": 2, "max": 2}},
                        actor="test")
    await agent.passes(4, seconds=1)
    assert len(agent.stops) == 1 and len(running(h, "vip")) == 1  # the second waits out the interval
    info = explain(h.rec, "vip")
    assert info["status"] == "unplaced"
    assert info["reason"].endswith("; it may stop replicas for room again in 7 s")
    await agent.passes(8, seconds=1)
    assert len(agent.stops) == 2 and len(running(h, "vip")) == 2
    assert running(h, "cheap") == []


async def test_the_victim_may_go_to_another_node_meanwhile(sqlite_store):
    h, agent = await _full_node(sqlite_store)
    [cheap] = running(h, "cheap")
    agent.failing.add("vip")  # vip keeps waiting for gpu-1's cards
    await h.catalog.add(VIP, actor="test")
    await agent.passes(3)
    assert running(h, "cheap") == []
    h.connect(register("gpu-2", gpu=gpus(2)))
    await agent.passes(1)
    [moved] = running(h, "cheap")
    assert h.rec.records[moved].node == "gpu-2"
    assert agent.stops == [cheap]
