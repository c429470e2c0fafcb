"""`llmgw up`: the files it writes, the key it keeps, and (slow) the whole thing as a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from up_started import up_started

from llmgw.agent.procs import pid_running
from llmgw.config.load import load_agent_config, load_server_config
from llmgw.store import open_store
from llmgw.up.layout import (
    Layout,
    Ports,
    agent_yaml,
    choose_ports,
    model_name_for,
    port_free,
    server_yaml,
)
from llmgw.up.procs import descendants
from llmgw.up.run import UpError, directory_lock, ensure_api_key


def test_the_files_it_writes_are_valid_configuration(tmp_path):
    layout = Layout(tmp_path / "with space")
    layout.make()
    ports = Ports(18080, 18081, 18082, 18083)
    layout.server_yaml.write_text(server_yaml(layout, ports, engine="sim", model="llmgw-sim"))
    layout.agent_yaml.write_text(agent_yaml(layout, ports))
    server = load_server_config(layout.server_yaml)
    assert (server.listen, server.agent_listen, server.agent_insecure) == ("127.0.0.1:18080", "127.0.0.1:18082", True)
    assert server.store.dsn.reveal() == str(layout.store) and server.auth.keys_required
    assert server.admin_token_file == str(layout.admin_token)
    [model] = server.models
    assert (model.name, model.engine, model.scaling.min) == ("llmgw-sim", "sim", 1)
    agent = load_agent_config(layout.agent_yaml)
    assert agent.insecure and agent.control_planes == ["127.0.0.1:18082"]
    assert agent.state_dir == str(layout.agent_dir)

    gguf = tmp_path / "My Model.Q4.gguf"
    llama = server_yaml(layout, ports, engine="llamacpp", model=model_name_for("llamacpp", str(gguf)),
                        source=str(gguf))
    layout.server_yaml.write_text(llama)
    [model] = load_server_config(layout.server_yaml).models
    assert (model.name, model.engine, model.source) == ("My-Model.Q4", "llamacpp", str(gguf))
    assert model_name_for("llamacpp", None) == "gemma-3-270m" and model_name_for("sim", None) == "llmgw-sim"

    from llmgw.plugins.manager import load_plugins
    from llmgw.up.layout import GEMMA_ARGS

    layout.server_yaml.write_text(server_yaml(layout, ports, engine="llamacpp", model="gemma-3-270m",
                                              source=str(gguf), args=GEMMA_ARGS))
    [model] = load_server_config(layout.server_yaml).models
    assert tuple(model.profiles[0].args) == GEMMA_ARGS
    assert load_plugins(allow=None).engines()["llamacpp"].validate(list(GEMMA_ARGS), {}) == []
    from llmgw.up.layout import SIM_ARGS

    layout.server_yaml.write_text(server_yaml(layout, ports, engine="sim", model="llmgw-sim", args=SIM_ARGS))
    [model] = load_server_config(layout.server_yaml).models
    assert tuple(model.profiles[0].args) == SIM_ARGS, "a context coding agents fit in, answers that end"
    assert load_plugins(allow=None).engines()["sim"].validate(list(SIM_ARGS), {}) == []


def test_ports_beside_the_one_asked_for_or_anywhere_free():
    ports = choose_ports(0)
    assert len({ports.client, ports.admin, ports.agent, ports.metrics}) == 4
    assert all(port_free(p) for p in (ports.client, ports.admin, ports.agent, ports.metrics))
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError, match="is taken"):
            choose_ports(s.getsockname()[1])


async def test_the_key_is_kept_and_reused_until_revoked(tmp_path):
    layout = Layout(tmp_path)
    layout.make()
    first = await ensure_api_key(layout)
    assert first.startswith("llmgw-") and oct(layout.api_key.stat().st_mode)[-3:] == "600"
    assert await ensure_api_key(layout) == first
    store = await open_store(str(layout.store))
    try:
        [key] = await store.list_keys()
        assert key.name == "llmgw up"
        await store.revoke_key(key.id)
    finally:
        await store.close()
    second = await ensure_api_key(layout)
    assert second != first and layout.api_key.read_text().strip() == second


def test_one_up_per_directory(tmp_path):
    layout = Layout(tmp_path)
    layout.make()
    taken = f"another `llmgw up` runs on {tmp_path} \\(pid {os.getpid()}\\)"
    with directory_lock(layout), pytest.raises(UpError, match=taken), directory_lock(layout):
        pass
    with directory_lock(layout):
        pass


def test_descendants_are_found():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in descendants()


# ---------------------------------------------------------------- the whole thing, as a process


def _start_up(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmgw", "up", "--dir", str(tmp_path / "up"), "--port", "0", "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, up_started(proc)


def _tree(pid: int) -> list[int]:
    return [p for p in descendants(pid) if pid_running(p)]


@pytest.mark.slow
def test_up_answers_through_the_openai_sdk_and_ctrl_c_stops_everything(tmp_path):
    import openai

    proc, info = _start_up(tmp_path)
    try:
        for key in ("base_url", "api_key", "model", "admin_url", "admin_token", "admin_token_file"):
            assert info[key], key
        client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"])
        answer = client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=5)
        assert answer.choices[0].message.content
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=info["base_url"], api_key="llmgw-wrong").models.list()
        import urllib.request

        request = urllib.request.Request(f"{info['admin_url']}/api/v1/models",
                                         headers={"Authorization": f"Bearer {info['admin_token']}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            models = json.load(resp)["models"]
        assert [(m["name"], m["status"]) for m in models] == [(info["model"], "ready")]
        children = _tree(proc.pid)
        assert info["pids"]["server"] in children and info["pids"]["agent"] in children
        assert len(children) >= 3  # the server, the agent, and the engine the agent started
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]
    deadline = time.monotonic() + 10
    while any(pid_running(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in children if pid_running(p)], "a process `up` started outlived it"

    # A second `up` on the same directory keeps the store and the key.
    again, info2 = _start_up(tmp_path)
    try:
        assert info2["api_key"] == info["api_key"] and info2["dir"] == info["dir"]
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(60) == 0


def test_a_child_is_restarted_at_most_five_times_a_minute(tmp_path):
    from llmgw.up.procs import RESTARTS_PER_MINUTE, Child

    child = Child("agent", ["true"], tmp_path / "agent.log")
    assert all(child.may_restart(now=100.0 + i) for i in range(RESTARTS_PER_MINUTE))
    assert not child.may_restart(now=110.0)  # the sixth within a minute: `up` gives up
    assert child.may_restart(now=161.0)  # a minute after the first, there is room again


def _answers(info: dict, within: float) -> float:
    """Seconds until the model answers through the gateway (AssertionError past `within`)."""
    import openai

    client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"], max_retries=0, timeout=5)
    started = time.monotonic()
    last: Exception | None = None
    while time.monotonic() - started < within:
        try:
            client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=2)
            return time.monotonic() - started
        except openai.OpenAIError as exc:
            last = exc
            time.sleep(0.1)
    raise AssertionError(f"no answer within {within} s: {last}")


def _new_pid(up_pid: int, old: int, others: set[int], within: float = 10.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        children = {p for p in descendants(up_pid) if pid_running(p) and Path(f"/proc/{p}/stat").exists()}
        new = [p for p in children - others - {old}
               if os.getppid() and Path(f"/proc/{p}/status").read_text().count(f"PPid:\t{up_pid}")]
        if new:
            return new[0]
        time.sleep(0.1)
    raise AssertionError("no new child of up")


@pytest.mark.slow
def test_under_up_a_killed_agent_or_server_is_started_again_and_the_model_answers(tmp_path):
    proc, info = _start_up(tmp_path)
    try:
        server, agent = info["pids"]["server"], info["pids"]["agent"]
        engines = set(_tree(proc.pid)) - {server, agent}
        assert engines, "the agent started an engine"
        os.kill(agent, signal.SIGKILL)
        _answers(info, within=10)  # the engine kept serving meanwhile
        new_agent = _new_pid(proc.pid, agent, {server} | engines)
        assert all(pid_running(p) for p in engines), "the new agent adopted the engine rather than starting another"
        time.sleep(2)
        _answers(info, within=10)

        os.kill(server, signal.SIGKILL)
        killed = time.monotonic()
        took = _answers(info, within=20)
        print(f"the gateway answered again {took:.2f} s after the server was killed")
        assert took < 5, f"the gateway answered again only after {took:.1f} s"
        assert pid_running(new_agent)
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
        err = proc.stderr.read()
    assert status == 0, err[-3000:]
    assert "llmgw agent exited (status -9); starting it again" in err
    assert "llmgw server exited (status -9); starting it again" in err


@pytest.mark.slow
def test_under_up_a_full_disk_keeps_the_model_answering_and_every_row(tmp_path):
    """DIR on a small disk that fills up: the leader keeps its lease, every request is answered, and each
    has its usage row once there is room again."""
    import openai
    from diskfaults import small_disk

    with small_disk(str(tmp_path / "up"), size="64m") as disk:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmgw", "up", "--dir", disk.path, "--port", "0", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        info = json.loads(proc.stdout.readline() or "{}")
        try:
            assert info, proc.stderr.read()[-3000:] if proc.poll() is not None else "up printed nothing"
            client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"], max_retries=0, timeout=10)
            disk.fill()
            ids = []
            for _ in range(400):
                raw = client.chat.completions.with_raw_response.create(
                    model=info["model"], messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
                ids.append(raw.headers["x-request-id"])  # a 503 would have raised
            disk.free()
            deadline = time.monotonic() + 15

            async def count() -> int:
                store = await open_store(os.path.join(disk.path, "llmgw.db"))
                try:
                    return sum([await store.get_usage(i) is not None for i in ids])
                finally:
                    await store.close()

            import asyncio

            while (found := asyncio.run(count())) < len(ids) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert found == len(ids)
        finally:
            disk.free()
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(60)
        assert status == 0, proc.stderr.read()[-3000:]
