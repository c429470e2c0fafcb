"""A node lacking a model's engine is told to install it; the replica waits; a failed install keeps it off."""

from __future__ import annotations

from llmgw.control.explain import explain, explain_text
from llmgw.wire import messages as w

from .conftest import Harness, gpus, model, register


def vllm_model():
    return model("qwen", engine="vllm", profiles=[{"name": "default", "gpus": 1}], scaling={"min": 1})


def node_without_vllm(node_id: str = "gpu-a") -> w.Register:
    import attrs

    return attrs.evolve(register(node_id, gpu=gpus(1), engines={"sim": "1"}), installable=("vllm", "llamacpp"))


async def test_a_node_lacking_the_engine_installs_it_and_the_replica_waits_for_it():
    h = Harness([vllm_model()])
    h.connect(node_without_vllm())
    await h.tick()
    assert h.agents.starts() == []  # nothing started before the engine is there
    (node_id, provision), = h.agents.take(w.Provision)
    assert node_id == "gpu-a" and [e.engine for e in provision.engines] == ["vllm"]
    want = provision.engines[0]
    rec, = [r for r in h.rec.records.values() if r.model == "qwen"]
    assert rec.awaiting_engine == "vllm" and rec.node == "gpu-a"
    h.rec.handle("gpu-a", w.EngineStatus(engine="vllm", state="installing", step="pip install vllm",
                                         request_id=want.request_id))
    assert "installing vllm: pip install vllm" in rec.message
    await h.tick(2000)  # longer than the start timeout: an installation may take that long
    assert h.agents.starts() == [] and rec.id in h.rec.records
    h.rec.handle("gpu-a", w.EngineStatus(
        engine="vllm", version="0.9.1", state="installed", request_id=want.request_id,
        engines={"sim": "1", "vllm": "0.9.1"},
        engine_installs=(w.EngineInstalled(engine="vllm", version="0.9.1", path="/e/vllm/0.9.1/bin/python"),)))
    await h.tick()
    (node_id, start), = h.agents.starts()
    assert node_id == "gpu-a" and start.engine == "vllm" and start.engine_version == "0.9.1"
    assert h.inventory.get("gpu-a").engines["vllm"] == "0.9.1"


async def test_a_failed_install_is_said_in_pips_words_and_keeps_the_model_off_that_node():
    h = Harness([vllm_model()])
    h.connect(node_without_vllm())
    await h.tick()
    (_, provision), = h.agents.take(w.Provision)
    pip_says = ("ERROR: Could not find a version that satisfies the requirement vllm (from versions: none)\n"
                "ERROR: No matching distribution found for vllm")
    h.rec.handle("gpu-a", w.EngineStatus(engine="vllm", state="failed", error=pip_says,
                                         request_id=provision.engines[0].request_id, engines={"sim": "1"}))
    await h.tick(60)
    assert h.agents.take(w.Provision) == [] and h.agents.starts() == []  # not asked again, not placed
    assert not [r for r in h.rec.records.values() if r.model == "qwen"]
    text = explain_text(explain(h.rec, "qwen"))
    assert "gpu-a: engine vllm could not be installed here: ERROR: No matching distribution found for vllm" in text
    # An operator asking again is something changing: it is tried once more.
    h.rec.install_engine("gpu-a", "vllm", "0.9.1", by="ops@example.com")
    await h.tick(60)
    (_, again), = h.agents.take(w.Provision)
    assert again.engines[0].version == "0.9.1"


async def test_a_node_that_has_the_engine_is_chosen_over_one_that_would_install_it():
    h = Harness([vllm_model()])
    h.connect(node_without_vllm("gpu-a"))
    h.connect(register("gpu-b", gpu=gpus(1), engines={"sim": "1", "vllm": "0.9.1"}))
    await h.tick()
    (node_id, _), = h.agents.starts()
    assert node_id == "gpu-b" and h.agents.take(w.Provision) == []
