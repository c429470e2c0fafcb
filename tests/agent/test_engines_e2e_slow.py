"""Engines end to end: a real control plane, its admin API and `llmgw ctl`, and an in-process agent.

- A node whose engines_dir holds a vLLM 0.9.1 environment advertises it in Register; a model pinning
  engine_version 0.9.1 is placed there, its start names that version, and that environment's program
  serves the model's answers (a stand-in vLLM: tests/agent/fake_vllm.py), through a real `llmgw server`'s
  gateway too.
- A node without vLLM is told by `llmgw ctl engine install` to install it; it installs it with uv from
  the mirror's package index (MIRROR/simple/ over its wheels/ folder, the mirror learnt from the Welcome),
  each step shown, and then advertises it; a version the index lacks fails in the installer's words.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest
from agent_cluster import kill_shards, make_agent
from fake_vllm import vllm_wheel, write_vllm_env

from llmgw.admin.testing import LiveAdmin, free_port
from llmgw.cli.main import main
from llmgw.config.load import parse_server_config
from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.plugins.manager import load_plugins
from llmgw.router.replicas import ReplicaSet

pytestmark = pytest.mark.slow

UV = Path(sys.executable).parent / "uv"  # from the test extra's uv on PyPI


def until(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ctl(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ctl", *argv])
    out, err = capsys.readouterr()
    return code, out, err


class Cluster:
    """A leading control plane with the admin API over it, an agent (node-1, one card), and a mirror."""

    def __init__(self, tmp: Path, monkeypatch, models: list, *, uv: Path | None = None) -> None:
        self.tmp, self.models, self.uv = tmp, models, uv
        self.slot = ControlPlaneSlot()
        self.live = LiveAdmin(tmp, cluster=AdminCluster(self.slot))
        self.monkeypatch = monkeypatch
        self.replicas = ReplicaSet()

    def __enter__(self) -> Cluster:
        self.live.__enter__()
        self.monkeypatch.setenv("LLMGW_ADMIN_URL", self.live.url)
        self.monkeypatch.setenv("LLMGW_ADMIN_TOKEN", self.live.TOKEN)
        try:
            self.live.run(self._start())
        except BaseException:
            self.live.__exit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        (self.tmp / "mirror" / "wheels").mkdir(parents=True, exist_ok=True)
        self.mirror_runner = await _serve(build_file_app(Layout(self.tmp / "mirror")))
        mirror_url = f"http://127.0.0.1:{self.mirror_runner.addresses[0][1]}"
        agent_port = free_port()
        config = parse_server_config({
            "agent_listen": f"127.0.0.1:{agent_port}", "agent_insecure": True,
            "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
            "mirror": {"url": mirror_url}, "models": self.models,
        })
        self.plane = ControlPlane(config, self.live.store, self.replicas, holder="cp-1")
        await self.plane.start()
        self.slot.plane = self.plane
        assert await self.plane.leadership.wait_leading(5)
        self.agent = make_agent(self.tmp, SimpleNamespace(address=f"127.0.0.1:{agent_port}"), gpus=1,
                                plugins=load_plugins())
        self.agent.installer.uv = str(self.uv) if self.uv else ""
        self.agent_task = asyncio.create_task(self.agent.run())

    def __exit__(self, *exc: object) -> None:
        try:
            self.live.run(self._stop())
        finally:
            self.live.__exit__(*exc)

    async def _stop(self) -> None:
        await self.agent.stop()
        kill_shards(self.agent)
        self.agent_task.cancel()
        await self.plane.stop()
        await self.mirror_runner.cleanup()

    def node(self):
        return self.plane.inventory.get("node-1")


async def _serve(app):
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


QWEN = {"name": "qwen", "engine": "vllm", "engine_version": "0.9.1", "profiles": [{"name": "gpu", "gpus": 1}],
        "scaling": {"min": 1, "max": 1}}


def test_a_node_with_vllm_0_9_1_advertises_it_and_serves_the_model_pinning_it(tmp_path, monkeypatch, capsys):
    python = write_vllm_env(tmp_path / "engines", "0.9.1")
    write_vllm_env(tmp_path / "engines", "0.10.0")  # the node's default: a pin must not get this one
    with Cluster(tmp_path, monkeypatch, [QWEN]) as c:
        until(lambda: c.node() is not None, "node-1 to register")
        node = c.node()
        assert node.engines["vllm"] == "0.10.0"  # the highest version is what an unpinned start gets
        assert {(i.engine, i.version, i.path) for i in node.engine_installs if i.engine == "vllm"} == {
            ("vllm", "0.9.1", str(python)), ("vllm", "0.10.0", str(tmp_path / "engines/vllm/0.10.0/bin/python3"))}
        [replica] = until(lambda: c.replicas.replicas_for("qwen"), "qwen to be ready", 90)
        [info] = c.plane.replicas_info()
        assert info["node"] == "node-1"
        shard = c.agent.supervisor.get(info["id"])
        assert shard.plan.argv[0] == str(python)  # that version's own program
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{info['port']}/v1",
                               api_key=c.plane.reconciler.keys.key_for(info["id"]))
        answer = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "hello from fake vllm 0.9.1"

        code, out, err = ctl(capsys, "nodes")
        assert code == 0, err
        assert "vllm 0.10.0" in out.splitlines()[1]
        code, out, err = ctl(capsys, "engines", "node-1")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()[1:]]
        assert ["node-1", "vllm", "0.9.1", "installed", str(python)] in rows
        assert ["node-1", "vllm", "0.10.0", "installed", str(tmp_path / "engines/vllm/0.10.0/bin/python3"),
                "(default)"] in rows

        # A model added at run time pins a version as one in server.yaml does; a bad one changes nothing.
        bad = tmp_path / "bad.yaml"
        bad.write_text("name: other\nengine: vllm\nengine_version: 0.9 1\nprofiles: [{name: gpu, gpus: 1}]\n")
        code, _, err = ctl(capsys, "model", "add", str(bad))
        assert code != 0 and "engine_version: '0.9 1' is not a version (like 0.9.1)" in err
        code, out, _ = ctl(capsys, "models", "--json")
        assert [m["name"] for m in json.loads(out)["models"]] == ["qwen"]
        pinned = tmp_path / "pinned.yaml"
        pinned.write_text("name: older\nengine: vllm\nengine_version: 0.8.5\nprofiles: [{name: gpu, gpus: 1}]\n"
                          "scaling: {min: 0, max: 1}\n")
        code, _, err = ctl(capsys, "model", "add", str(pinned))
        assert code == 0, err
        code, out, _ = ctl(capsys, "models", "older", "--json")
        assert json.loads(out)["spec"]["engine_version"] == "0.8.5"


def test_ctl_engine_install_has_the_node_install_vllm_from_the_mirror_then_advertise_it(tmp_path, monkeypatch,
                                                                                       capsys):
    vllm_wheel(tmp_path / "mirror" / "wheels", "0.9.1")
    with Cluster(tmp_path, monkeypatch, [], uv=UV) as c:
        until(lambda: c.node() is not None, "node-1 to register")
        assert "vllm" not in c.node().engines and "vllm" in c.node().installable

        code, _, err = ctl(capsys, "engine", "install", "node-1", "nope")
        assert code != 0 and "node-1's agent cannot install 'nope'" in err

        code, out, err = ctl(capsys, "engine", "install", "node-1", "vllm==0.9.1")
        assert code == 0, out + err
        lines = out.splitlines()
        assert lines[0].startswith("node-1: installing vllm 0.9.1; job job-")
        assert lines[1].startswith("job-") and ": engine vllm on node-1, started" in lines[1]
        text = "\n".join(lines)
        assert f"creating a Python environment with {UV}" in text
        assert "/simple/" in text and "uv pip install vllm==0.9.1" in text
        assert "done: vllm 0.9.1 installed on node-1" in lines[-1]

        env = tmp_path / "engines" / "vllm" / "0.9.1"
        assert c.node().engines["vllm"] == "0.9.1"  # advertised
        code, out, _ = ctl(capsys, "engines", "node-1", "--json")
        [row] = [r for r in json.loads(out)["engines"] if r["engine"] == "vllm"]
        assert (row["state"], row["version"], row["path"], row["default"]) == (
            "installed", "0.9.1", str(env / "bin" / "python3"), True)
        assert row["job"] and row["by"] == "root"
        code, out, _ = ctl(capsys, "jobs")
        assert any(line.split()[1:5] == ["vllm", "on", "node-1", "engine"] and " done " in line
                   for line in out.splitlines())

        code, out, err = ctl(capsys, "engine", "install", "node-1", "vllm==9.9.9")
        assert code == 1
        assert "failed: vllm could not be installed on node-1: cause: Because there is no version of vllm==9.9.9" in out
        assert "            error: No solution found when resolving dependencies" in out.splitlines()  # indented
        code, out, _ = ctl(capsys, "engines", "node-1")
        assert "vllm could not be installed" in out and "9.9.9" in out
        assert not (tmp_path / "engines" / "vllm" / "9.9.9").exists()


async def test_an_agent_refuses_a_start_naming_a_version_it_lacks(tmp_path):
    from agent_cluster import FakeControlPlane

    from llmgw.wire import messages as wire

    write_vllm_env(tmp_path / "engines", "0.10.0")
    cp = await FakeControlPlane().start()
    agent = make_agent(tmp_path, cp, gpus=1, plugins=load_plugins())
    task = asyncio.create_task(agent.run())
    try:
        reg = await cp.wait_registers(1)
        assert reg.engines["vllm"] == "0.10.0"
        await cp.send(wire.StartShard(shard_id="q1", model="qwen", engine="vllm", engine_version="0.9.1", gpus=(0,),
                                      api_key="k" * 32, command_id="c1"))
        failed = await cp.status("q1", "failed")
        assert failed.message == ("vllm 0.9.1 is not installed on this node (it has: 0.10.0); "
                                  "`llmgw ctl engine install NODE vllm==0.9.1`")
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
        await cp.stop()


async def test_a_real_server_places_the_pinned_model_and_its_gateway_answers_from_that_version(tmp_path):
    """`llmgw server` as a process; the agent in this one (it has a card only as a test's inventory says)."""
    import os
    import subprocess

    python = write_vllm_env(tmp_path / "engines", "0.9.1")
    write_vllm_env(tmp_path / "engines", "0.10.0")
    ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}
    (tmp_path / "server.yaml").write_text(json.dumps({
        "listen": f"127.0.0.1:{ports['client']}", "admin_listen": f"127.0.0.1:{ports['admin']}",
        "admin_token_file": str(tmp_path / "admin-token"), "metrics_listen": f"127.0.0.1:{ports['metrics']}",
        "agent_listen": f"127.0.0.1:{ports['agent']}", "agent_insecure": True,
        "store": {"dsn": f"sqlite:///{tmp_path}/store.db"}, "auth": {"keys_required": False},
        "control": {"reconcile_interval": "300ms"}, "models": [QWEN],
    }))
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml")],
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT)
    agent = make_agent(tmp_path, SimpleNamespace(address=f"127.0.0.1:{ports['agent']}"), gpus=1,
                       plugins=load_plugins())
    task = asyncio.create_task(agent.run())
    try:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{ports['client']}/v1", api_key="none",
                                    max_retries=0, timeout=10)
        deadline = time.monotonic() + 90
        while True:
            try:
                answer = await client.chat.completions.create(model="qwen",
                                                              messages=[{"role": "user", "content": "hi"}])
                break
            except (openai.APIConnectionError, openai.APIStatusError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError((tmp_path / "server.log").read_text()[-3000:]) from None
                await asyncio.sleep(0.5)
        assert answer.choices[0].message.content == "hello from fake vllm 0.9.1"  # the pinned one, not 0.10.0
        [shard] = agent.supervisor.shards()
        assert shard.plan.argv[0] == str(python)

        def ctl_out(*argv: str) -> str:
            return subprocess.run([sys.executable, "-m", "llmgw", "ctl", *argv, "--admin",
                                   f"http://127.0.0.1:{ports['admin']}", "--token-file", str(tmp_path / "admin-token")],
                                  capture_output=True, text=True, check=True).stdout

        out = await asyncio.to_thread(ctl_out, "nodes")
        assert "vllm 0.10.0" in out.splitlines()[1]
        out = await asyncio.to_thread(ctl_out, "engines")
        assert any(line.split()[:4] == ["node-1", "vllm", "0.9.1", "installed"] for line in out.splitlines())
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
        server.terminate()
        server.wait(30)
        log.close()
