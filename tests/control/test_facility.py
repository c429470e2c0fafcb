"""The facility: holds keep nodes, racks and cards free; power budgets keep racks and PDUs within their caps."""

from __future__ import annotations

import pytest

from llmgw.config.load import ConfigError, parse_server_config
from llmgw.config.server import FacilityConfig, PowerBudget
from llmgw.control.explain import explain
from llmgw.control.facility import Hold, domains_of, parse_domain
from llmgw.wire import messages as w

from .conftest import ENGINES, Harness, gpus, model, register

RACKED = {"llmgw.io/rack": "r1", "llmgw.io/pdu": "r1-a,r1-b", "llmgw.io/row": "12"}


def gpu_model(name="qwen", cards=2, **spec):
    return model(name, engine="vllm", profiles=[{"name": "d", "gpus": cards}], **spec)


def harness(models, facility: FacilityConfig | None = None) -> Harness:
    h = Harness(models)
    h.rec.facility = facility or FacilityConfig()
    return h


def rejection(h: Harness, name: str, node: str) -> str:
    """What the model's last placement said of `node`."""
    decision = explain(h.rec, name)["last_placement"] or {}
    for sentence in decision.get("rejections", []):
        if sentence.startswith(f"{node}: "):
            return sentence[len(node) + 2:]
    raise AssertionError(f"no rejection of {node} in {decision}")


def test_a_nodes_domains_come_from_its_labels():
    assert domains_of("gpu01", RACKED) == ["row:12", "rack:r1", "pdu:r1-a", "pdu:r1-b", "node:gpu01"]
    assert domains_of("gpu02", {}) == ["node:gpu02"]
    assert parse_domain("card:gpu01:3") == "card:gpu01:3"
    with pytest.raises(ValueError, match="is not a domain: write level:name"):
        parse_domain("shelf:3")


async def test_a_held_rack_takes_nothing_new_and_says_why_until_its_hold_ends():
    h = harness([gpu_model(scaling={"min": 2, "max": 2})])
    h.connect(register("node-a", gpu=gpus(4), labels=RACKED))
    h.connect(register("node-b", gpu=gpus(2)))
    now = h.rec.wall_clock()
    h.rec.holds = {"rack:r1": Hold("rack:r1", "PDU swap", until=now + 3600)}
    [(node_id, _)] = await h.start_ready()
    assert node_id == "node-b"
    await h.tick()
    assert h.agents.starts() == []
    assert rejection(h, "qwen", "node-a") == "held (rack:r1): PDU swap, until 2025-03-10 01:00 UTC"

    h.rec.wall_clock = lambda: now + 3600  # the hold has ended: node-a counts again
    [(node_id, _)] = await h.start_ready()
    assert node_id == "node-a"


async def test_a_held_card_is_never_handed_out():
    h = harness([gpu_model("two", 2), gpu_model("one", 1)])
    h.connect(register("node-a", gpu=gpus(2)))
    h.rec.holds = {"card:node-a:0": Hold("card:node-a:0", "fan noise")}
    started = await h.start_ready()
    assert [(m.model, m.gpus) for _, m in started] == [("one", (1,))]
    assert "two" in explain(h.rec, "two")["model"]
    assert explain(h.rec, "two")["status"] != "ready"


async def test_a_racks_power_budget_keeps_the_next_replica_out_and_says_by_how_much():
    budget = FacilityConfig(margin=0.0, gpu_watts=700, node_watts=200,
                            budgets=[PowerBudget(domain="rack:r1", cap_watts=2800)])
    h = harness([gpu_model(scaling={"min": 2, "max": 2})], budget)
    h.connect(register("node-a", gpu=gpus(8), labels=RACKED))
    started = await h.start_ready()
    assert len(started) == 1  # 200 W + 2 × 700 W fits in 2.8 kW; a second pair would make 3.0 kW
    await h.tick()
    assert h.agents.starts() == []
    assert rejection(h, "qwen", "node-a") == ("rack:r1: 1.6 kW of a 2.8 kW limit in use, the replica needs ~1.4 kW")

    h.connect(register("node-b", gpu=gpus(8)))  # in no budgeted domain
    [(node_id, _)] = await h.start_ready()
    assert node_id == "node-b"


async def test_power_is_read_from_the_cards_limits_and_the_margin_is_kept_free():
    budget = FacilityConfig(margin=0.1, budgets=[PowerBudget(domain="pdu:r1-b", cap_watts=2000, other_watts=100)])
    h = harness([gpu_model(cards=1, scaling={"min": 4, "max": 4})], budget)
    h.connect(register("node-a", gpu=gpus(8), labels=RACKED))
    # The agent reports each card's power limit: 500 W. The PDU's limit is 1.8 kW, 100 W of it taken by others.
    h.rec.handle("node-a", w.Heartbeat(seq=2, gpus=tuple(w.GpuSensor(index=i, power_limit_w=500, power_w=80)
                                                         for i in range(8))))
    for _ in range(4):
        await h.start_ready()
    assert len([r for r in h.rec.records.values() if r.live]) == 3  # 100 + 3 × 500 W = 1.6 kW ≤ 1.8 kW
    assert rejection(h, "qwen", "node-a") == (
        "pdu:r1-b: 1.6 kW of a 1.8 kW limit (2.0 kW cap less 10%) in use, the replica needs ~0.5 kW")


async def test_a_draw_nobody_knows_never_blocks():
    budget = FacilityConfig(margin=0.0, budgets=[PowerBudget(domain="rack:r1", cap_watts=1)])
    h = harness([gpu_model()], budget)
    h.connect(register("node-a", gpu=gpus(2), labels=RACKED))
    assert len(await h.start_ready()) == 1


def test_budgets_are_checked_naming_the_budget_and_the_key():
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"facility": {"margin": 1.5, "budgets": [
            {"domain": "shelf:1", "cap_watts": 100}, {"domain": "rack:r1", "cap_watts": 0},
            {"domain": "rack:r1", "cap_watts": 10}]}})
    text = str(caught.value)
    assert "facility.margin: give a share from 0 to below 1" in text
    assert "facility.budgets[0].domain: 'shelf:1' is not a domain" in text
    assert "facility.budgets[1].cap_watts: must be more than 0" in text
    assert "facility.budgets[2].domain: rack:r1 has a budget already" in text


async def test_holds_are_kept_in_the_store_read_back_by_the_next_leader_and_audited(tmp_path):
    from llmgw.control.service import ControlPlane
    from llmgw.router.replicas import ReplicaSet
    from llmgw.store import open_store

    from .test_service import server_config, until

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    cp = ControlPlane(server_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    try:
        await cp.start()
        assert await cp.leadership.wait_leading(3)
        with pytest.raises(ValueError, match="^domain: 'shelf:3' is not a domain"):
            await cp.hold("shelf:3", "x", actor="ann")
        with pytest.raises(ValueError, match="^reason: say why it is held"):
            await cp.hold("rack:r1", "  ", actor="ann")
        with pytest.raises(ValueError, match="^until: that time has passed"):
            await cp.hold("rack:r1", "PDU swap", until=1.0, actor="ann")
        assert (await store.get_setting("control.facility_holds")) is None  # nothing written for a refusal
        hold = await cp.hold("rack:r1", "PDU swap", actor="ann")
        await cp.hold("card:gpu01:3", "fan noise", actor="ann")
        assert hold.words() == "held (rack:r1): PDU swap"
        report = cp.facility()
        assert [h["domain"] for h in report["holds"]] == ["card:gpu01:3", "rack:r1"]
        await cp.release("card:gpu01:3", actor="ann")
        with pytest.raises(KeyError):
            await cp.release("card:gpu01:3", actor="ann")
        assert [e.action for e in await store.list_audit(actor="ann")] == \
            ["facility.release", "facility.hold", "facility.hold"]
    finally:
        await cp.stop()
    cp2 = ControlPlane(server_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-2")
    try:
        await cp2.start()
        assert await cp2.leadership.wait_leading(5)
        await until(lambda: cp2.reconciler.holds, what="the holds read back")
        assert list(cp2.reconciler.holds) == ["rack:r1"]
        assert cp2.reconciler.holds["rack:r1"].reason == "PDU swap"
    finally:
        await cp2.stop()
        await store.close()
