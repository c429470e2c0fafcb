"""`llmgw ctl model serve`: a repository fetched into the mirror, planned, added, started and asked hello, as one job.

Real here: the registry (the tests' stand-in for Hugging Face, over HTTP), the mirror (`llmgw mirror serve`'s
files listener and its API over mutual TLS), the control plane in the gateway with its store, the admin API over
HTTP, `llmgw ctl` and the openai SDK. The agent is the tests' fake that starts a sim engine for each StartShard:
the node says it runs llama.cpp, and what the test checks is what it was told to run (the mirror URL of the file
the plan chose, the profile placement took).
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import aiohttp
import attrs
import openai
import pytest

from llmgw.config.units import Duration
from llmgw.mirror.serve import ServeOptions, serve
from llmgw.testing.tiny_gguf import write_tiny_gguf, write_vocab_gguf
from llmgw.wire import messages as w

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from control.test_rollout_slow import _job  # noqa: E402
from control.test_runtime_catalog import Admin, config_for  # noqa: E402
from control.test_service import EngineStartingAgent, free_port, until  # noqa: E402

pytestmark = pytest.mark.slow


class LlamaNode(EngineStartingAgent):
    """A CPU node with llama.cpp installed; each StartShard runs a sim engine in its place."""

    def register(self) -> w.Register:
        reg = super().register()
        return attrs.evolve(reg, engines={"llamacpp": "b5000", "sim": "1"},
                            inventory=w.Inventory(cpu=w.CpuInfo(cores=8), memory_total_bytes=16 << 30,
                                                  memory_available_bytes=12 << 30))


@pytest.fixture
async def cluster(tmp_path, registry, certs, mirror_dir, no_hf_env, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app

    vocab = write_vocab_gguf(tmp_path / "vocab.gguf")
    files = {name: write_tiny_gguf(tmp_path / name, vocab, context=4096).read_bytes()
             for name in ("tiny-Q8_0.gguf", "tiny-F16.gguf")}
    registry.create("acme/tiny-chat-GGUF", {**files, "README.md": b"# tiny chat\n"})
    files_port, api_port = free_port(), free_port()
    stop, seen = asyncio.Event(), []
    mirror = asyncio.create_task(serve(ServeOptions(
        directory=str(mirror_dir), listen=f"127.0.0.1:{files_port}", api_listen=f"127.0.0.1:{api_port}",
        tls_cert=certs["mirror"], tls_key=certs["mirror-key"], tls_ca=certs["ca"], api_client="control-plane",
        registry=registry.base, allow_private=True), stop=stop, started=seen.extend))
    await until(lambda: bool(seen), what="the mirror listening")
    config = config_for(tmp_path, str(tmp_path / "store.db"), mirror={
        "url": f"http://127.0.0.1:{files_port}", "api": f"https://127.0.0.1:{api_port}"},
        agent_tls={"cert": certs["control-plane"], "key": certs["control-plane-key"], "ca": certs["ca"]})
    config = attrs.evolve(config, control=attrs.evolve(config.control, heartbeat_window=Duration(seconds=300)))
    app = make_gateway_app(config)
    from llmgw.plugins.manager import load_plugins

    # the engines as shipped (llama.cpp's allow list checks the profile the plan writes)
    slot = attach_control_plane(app, config, engines=load_plugins(allow=None).engines(), holder="cp-1")
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    slot.plane.reconciler.hold_starts_until = 0.0
    agent = LlamaNode([f"127.0.0.1:{slot.plane.agent_port}"])
    agent.start()
    await until(lambda: slot.plane.nodes(), what="the agent registered")
    async with aiohttp.ClientSession() as http:
        try:
            yield config, slot, client, agent, Admin(http, config, tmp_path), f"http://127.0.0.1:{files_port}"
        finally:
            await agent.stop()
            stop.set()
            await asyncio.wait_for(mirror, 10)


async def _ctl(config, tmp_path, *argv: str) -> tuple[int, str]:
    from llmgw.cli.main import main

    def run() -> tuple[int, str]:
        out = io.StringIO()
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            code = main(["ctl", *argv, "--admin", f"http://{config.admin_listen}",
                         "--token-file", str(tmp_path / "admin-token")])
        finally:
            sys.stdout, sys.stderr = old
        return code, out.getvalue()

    return await asyncio.to_thread(run)


async def test_a_repository_is_fetched_planned_added_started_and_answers(cluster, tmp_path, registry):
    config, slot, client, agent, admin, files_url = cluster
    code, out = await _ctl(config, tmp_path, "model", "serve", "acme/tiny-chat-GGUF", "--name", "tiny-chat",
                           "--context", "2048", "--wait")
    assert code == 0, out
    job = (await admin.call("GET", "/jobs", model="tiny-chat"))["jobs"]
    serve_job = next(j for j in job if j["kind"] == "serve")
    steps = [s["text"] for s in serve_job["steps"]]
    assert serve_job["state"] == "done", steps
    assert any("asking the mirror to fetch acme/tiny-chat-GGUF" in s for s in steps)
    assert any("the mirror holds acme/tiny-chat-GGUF as " in s for s in steps)
    assert any(s.startswith("chose tiny-F16.gguf (F16)") for s in steps), steps  # both fit alike: the better
    assert any(s.startswith("added tiny-chat (llamacpp, profiles cpu)") for s in steps)
    assert "tiny-chat serves: it answered hello" in steps[-1]
    # what the node was told to run: the planned file from the mirror's file server, on llama.cpp
    (start,) = [m for m in agent.shards.values() if m.model == "tiny-chat"]
    assert start.engine == "llamacpp"
    assert start.weights.source.startswith(f"{files_url}/tiny-chat-gguf/") or \
        start.weights.source.startswith(f"{files_url}/")
    assert start.weights.source.endswith("/tiny-F16.gguf")
    assert "--ctx-size" in start.args and "2048" in start.args
    # the model is in the catalog and a client is answered through the gateway
    model = await admin.call("GET", "/models/tiny-chat")
    assert model["model"]["origin"] == "store"
    assert [p["name"] for p in model["spec"]["profiles"]] == ["cpu"]
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="none", max_retries=0)
    answer = await sdk.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=8)
    assert answer.choices[0].message.content
    await sdk.close()
    # a second serve of the same name is refused before anything is fetched
    fetched = len(registry.file_gets())
    code, out = await _ctl(config, tmp_path, "model", "serve", "acme/tiny-chat-GGUF", "--name", "tiny-chat")
    assert code != 0 and "'tiny-chat' is in the catalog already" in out, out
    assert len(registry.file_gets()) == fetched


async def test_a_model_already_on_the_mirror_is_served_without_a_fetch(cluster, tmp_path, registry):
    config, slot, client, agent, admin, files_url = cluster
    first = await admin.call("POST", "/model-serve", {"source": "acme/tiny-chat-GGUF", "files": ["*Q8_0*"],
                                                       "name": "first"})
    done = await _job(admin, first["id"])
    assert done["state"] == "done", done["steps"]
    held = next(s["text"] for s in done["steps"] if s["text"].startswith("the mirror holds"))
    version = held.split(" as ", 1)[1].split(" ", 1)[0]  # MODEL/VERSION
    fetched = len(registry.file_gets())
    again = await admin.call("POST", "/model-serve", {"source": version, "name": "second"})
    done = await _job(admin, again["id"])
    assert done["state"] == "done", done["steps"]
    assert not any("asking the mirror to fetch" in s["text"] for s in done["steps"])
    assert any(s["text"].startswith("chose tiny-Q8_0.gguf") for s in done["steps"])  # only Q8_0 was fetched
    assert len(registry.file_gets()) == fetched


async def test_refusals_change_nothing_and_a_failed_fetch_adds_nothing(cluster, tmp_path):
    config, slot, client, agent, admin, files_url = cluster
    before = {m["name"] for m in (await admin.call("GET", "/models"))["models"]}
    async with admin.http.post(admin.base + "/model-serve", json={"source": "acme/tiny-chat-GGUF",
                                                                  "name": "primary"},
                               headers=admin.headers) as resp:
        assert resp.status == 409  # primary is declared in server.yaml
        assert "name: 'primary' is declared in server.yaml; serve it under another name" in (await resp.json())["error"]
    async with admin.http.post(admin.base + "/model-serve", json={"source": "acme/tiny-chat-GGUF",
                                                                  "concurrency": 0},
                               headers=admin.headers) as resp:
        assert resp.status == 400
        assert "concurrency" in await resp.text()
    job = await admin.call("POST", "/model-serve", {"source": "acme/no-such-repo", "name": "ghost"})
    done = await _job(admin, job["id"])
    assert done["state"] == "failed"
    assert "the mirror could not fetch acme/no-such-repo" in done["now"]
    assert {m["name"] for m in (await admin.call("GET", "/models"))["models"]} == before


async def test_a_serve_handed_over_mid_way_is_carried_on_from_its_stage_and_fetches_and_adds_once(cluster, tmp_path,
                                                                                                   registry):
    """The leader stops leading just after the serve began: its copy of the job says so, the job stays in the
    store, and the leader that takes the lease (here the same one, back) carries it on to done, nothing twice."""
    config, slot, client, agent, admin, files_url = cluster
    plane = slot.plane
    started = await admin.call("POST", "/model-serve", {"source": "acme/tiny-chat-GGUF", "files": ["*Q8_0*"],
                                                         "name": "kept"})
    await plane.serving.hand_over()
    handed = await admin.call("GET", f"/jobs/{started['id']}")
    assert handed["state"] == "failed"
    assert handed["now"] == ("failed: handed over: this control plane stopped leading; the next leader carries it "
                             "on from its last stage")
    await plane.serving.take_over()  # as on gaining the lease (which may have come first, on a slow machine)
    done = await _job(admin, started["id"])
    steps = [s["text"] for s in done["steps"]]
    assert done["state"] == "done", "\n".join(steps)
    resumed = [s for s in steps if s.startswith("resumed by cp-1 after cp-1 (epoch 1) lost the lease, from its "
                                                 "stage '")]
    assert len(resumed) == 1, steps
    assert done["now"].startswith("done: kept serves: it answered hello") and \
        done["now"].endswith("(resumed by cp-1 after cp-1 (epoch 1) lost the lease)"), done["now"]
    assert sum(1 for s in steps if s.startswith("added kept ")) == 1, steps
    assert [m.model for m in agent.shards.values()].count("kept") == 1
    gets = [g["path"] for g in registry.file_gets()]
    assert len(gets) == len(set(gets)), gets  # each file fetched from the registry once
    for _ in range(50):  # removed once the job's task has ended, just after the job
        if await plane.store.get_setting(f"control.jobs.{started['id']}") is None:
            break
        await asyncio.sleep(0.1)
    assert await plane.store.get_setting(f"control.jobs.{started['id']}") is None
