"""A model pinning engine_version is placed only where that version is or can be installed, and its start
carries it; an engine install is a job with timed steps, done or failed in the installer's words."""

from __future__ import annotations

import attrs
import pytest

from llmgw.control.catalog import Catalog
from llmgw.control.explain import explain, explain_text
from llmgw.control.jobs import Jobs
from llmgw.wire import messages as w

from .conftest import ENGINES, Harness, gpus, model, register


def pinned(version: str = "0.9.1"):
    return model("qwen", engine="vllm", engine_version=version, profiles=[{"name": "default", "gpus": 1}],
                 scaling={"min": 1})


def node(node_id: str, *installs: str, installable: tuple[str, ...] = ()) -> w.Register:
    reg = register(node_id, gpu=gpus(1), engines={"sim": "1", **({"vllm": installs[0]} if installs else {})})
    return attrs.evolve(reg, installable=installable, engine_installs=tuple(
        w.EngineInstalled(engine="vllm", version=v, path=f"/e/vllm/{v}/bin/python") for v in installs))


def installed(h: Harness, node_id: str, want: w.EngineWant, *versions: str) -> None:
    h.rec.handle(node_id, w.EngineStatus(
        engine="vllm", version=want.version, state="installed", step=f"installed at /e/vllm/{want.version}/bin/python",
        request_id=want.request_id, engines={"sim": "1", "vllm": versions[0]},
        engine_installs=tuple(w.EngineInstalled(engine="vllm", version=v, path=f"/e/vllm/{v}/bin/python")
                              for v in versions)))


async def install_sent(version: str):
    """ann asks gpu-a (vllm installable there) to install vllm VERSION and a pass sends it: the harness, its
    jobs, the install's state and the Provision the node was sent."""
    h = Harness([])
    h.rec.observer = jobs = Jobs()
    h.connect(node("gpu-a", installable=("vllm",)))
    state = h.rec.install_engine("gpu-a", "vllm", version, by="ann")
    await h.tick()
    (_, provision), = h.agents.take(w.Provision)
    return h, jobs, state, provision


async def test_the_start_carries_the_pinned_version_where_the_node_has_it_beside_another():
    h = Harness([pinned("0.9.1")])
    h.connect(node("gpu-a", "0.10.0", "0.9.1"))  # the node's default is 0.10.0
    await h.tick()
    (node_id, start), = h.agents.starts()
    assert node_id == "gpu-a" and start.engine_version == "0.9.1"
    assert h.agents.take(w.Provision) == []


async def test_a_node_with_another_version_that_cannot_install_is_passed_over_saying_so():
    h = Harness([pinned("0.9.1")])
    h.connect(node("gpu-a", "0.8.5"))
    await h.tick()
    assert h.agents.starts() == [] and h.agents.take(w.Provision) == []
    text = explain_text(explain(h.rec, "qwen"))
    assert "gpu-a: has vllm 0.8.5, not 0.9.1 as the model pins" in text


async def test_a_node_with_another_version_installs_the_pinned_one_then_starts_it():
    h = Harness([pinned("0.9.1")])
    h.connect(node("gpu-a", "0.8.5", installable=("vllm",)))
    await h.tick()
    assert h.agents.starts() == []
    (node_id, provision), = h.agents.take(w.Provision)
    want = provision.engines[0]
    assert node_id == "gpu-a" and (want.engine, want.version) == ("vllm", "0.9.1")
    rec, = [r for r in h.rec.records.values() if r.model == "qwen"]
    assert rec.message == "waiting for gpu-a to install vllm 0.9.1"
    installed(h, "gpu-a", want, "0.8.5", "0.9.1")
    await h.tick()
    (_, start), = h.agents.starts()
    assert start.engine_version == "0.9.1"


async def test_an_install_is_a_job_with_timed_steps_ending_done():
    h = Harness([])
    now = [1000.0]
    h.rec.observer = jobs = Jobs(wall_clock=lambda: now[0])
    h.connect(node("gpu-a", installable=("vllm",)))
    state = h.rec.install_engine("gpu-a", "vllm", "0.9.1", by="ann")
    job = jobs.get(state.job)
    assert (job.kind, job.model, job.by, job.node, job.engine, job.state) == \
        ("engine", "vllm on gpu-a", "ann", "gpu-a", "vllm", "running")
    await h.tick()
    (_, provision), = h.agents.take(w.Provision)
    want = provision.engines[0]
    for step in ("creating a Python environment", "pip install vllm==0.9.1"):
        now[0] += 5
        h.rec.handle("gpu-a", w.EngineStatus(engine="vllm", version="0.9.1", state="installing", step=step,
                                             request_id=want.request_id))
    now[0] += 20
    installed(h, "gpu-a", want, "0.9.1")
    assert job.state == "done" and job.now.startswith("done: vllm 0.9.1 installed on gpu-a")
    assert job.now.endswith("in 30 s")
    assert [(s.at, s.text) for s in job.steps] == [
        (1000.0, "ann asked gpu-a to install vllm 0.9.1"), (1000.0, "sent to the node"),
        (1005.0, "creating a Python environment"), (1010.0, "pip install vllm==0.9.1"),
        (1030.0, job.now)]
    await h.tick()  # a pass's measure does not take an engine job for a model's
    assert job.state == "done" and [j.id for j in jobs.select()] == [job.id]


async def test_a_failed_install_fails_its_job_in_pips_words():
    h, jobs, state, provision = await install_sent("9.9.9")
    pip_says = ("ERROR: Could not find a version that satisfies the requirement vllm==9.9.9 (from versions: 0.9.1)\n"
                "ERROR: No matching distribution found for vllm==9.9.9")
    h.rec.handle("gpu-a", w.EngineStatus(engine="vllm", state="failed", error=pip_says,
                                         request_id=provision.engines[0].request_id, engines={"sim": "1"}))
    job = jobs.get(state.job)
    assert job.state == "failed"
    assert job.now == ("failed: vllm could not be installed on gpu-a: "
                       "ERROR: No matching distribution found for vllm==9.9.9")
    assert job.steps[-2].text == "the installer said:\n" + pip_says


def test_engine_version_is_checked_when_the_model_is_defined():
    catalog = Catalog([], None, ENGINES)
    assert catalog._problems(pinned("0.9.1")) == []
    assert catalog._problems(pinned("0.9 1")) == [
        "engine_version: '0.9 1' is not a version (like 0.9.1): letters, digits and . + ! _ - only"]
    two = model("mixed", engine="vllm", engine_version="0.9.1",
                profiles=[{"name": "a", "gpus": 1}, {"name": "b", "engine": "sim"}])
    assert catalog._problems(two) == [
        "engine_version: its profiles run different engines (sim, vllm); pin a version only when they all run one"]


class _Plane:
    """What AdminEngines reads of a leading control plane."""

    def __init__(self, h: Harness) -> None:
        self.inventory, self.reconciler = h.inventory, h.rec


def admin(h: Harness):
    from llmgw.control.admin_engines import AdminEngines

    class Engines(AdminEngines):
        def _leader(self):
            return _Plane(h)

    return Engines()


async def test_the_admin_api_lists_engines_and_refuses_what_cannot_be_installed():
    from llmgw.admin.cluster_api import ClusterConflict, ClusterInvalid, ClusterNotFound

    h = Harness([])
    h.rec.observer = Jobs()
    h.connect(node("gpu-a", "0.10.0", "0.9.1", installable=("vllm", "llamacpp")))
    h.connect(node("gpu-b"))
    api = admin(h)
    with pytest.raises(ClusterNotFound, match="no node called 'gpu-z'"):
        await api.install_engine("gpu-z", "vllm", "", actor="ann")
    with pytest.raises(ClusterInvalid, match=r"engine: gpu-b's agent cannot install 'vllm' \(it installs: none\)"):
        await api.install_engine("gpu-b", "vllm", "", actor="ann")
    with pytest.raises(ClusterInvalid, match="version: '1 2' is not a version"):
        await api.install_engine("gpu-a", "vllm", "1 2", actor="ann")
    started = await api.install_engine("gpu-a", "llamacpp", "", actor="ann")
    assert (started.node, started.engine, started.state) == ("gpu-a", "llamacpp", "queued") and started.job
    with pytest.raises(ClusterConflict, match=f"gpu-a is installing llamacpp now: llmgw ctl jobs {started.job}"):
        await api.install_engine("gpu-a", "llamacpp", "", actor="ann")
    rows = [(r.node, r.engine, r.version, r.state, r.default, r.job)
            for r in await api.engines(node=None) if r.engine != "sim"]
    assert rows == [("gpu-a", "vllm", "0.10.0", "installed", True, ""),
                    ("gpu-a", "vllm", "0.9.1", "installed", False, ""),
                    ("gpu-a", "llamacpp", "", "queued", False, started.job)]
    h.disconnect("gpu-a")
    with pytest.raises(ClusterConflict, match="gpu-a's agent is not connected"):
        await api.install_engine("gpu-a", "vllm", "0.9.1", actor="ann")
    with pytest.raises(ClusterNotFound):
        await api.engines(node="gpu-z")


async def test_an_install_cut_off_by_a_disconnect_is_asked_again_when_the_node_is_back():
    h, jobs, state, first = await install_sent("0.9.1")
    h.disconnect("gpu-a")
    job = jobs.get(state.job)
    assert job.state == "running" and job.now == (
        "the node's agent disconnected (gone); asked again when it is back")
    h.connect(node("gpu-a", installable=("vllm",)))
    await h.tick()
    (_, again), = h.agents.take(w.Provision)
    assert again.engines[0].request_id == first.engines[0].request_id  # the same request: its statuses match
    # Back with the version installed meanwhile: the job ends there.
    h.disconnect("gpu-a")
    h.connect(node("gpu-a", "0.9.1", installable=("vllm",)))
    assert job.state == "done" and "found installed when the node registered again" in job.now
