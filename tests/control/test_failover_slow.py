"""Two `llmgw server` processes on one PostgreSQL and one `llmgw agent`: kill -9 the leader,
the standby takes over within 30 s, the agent moves to it and its engine keeps serving."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from llmgw.up.procs import descendants

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_server(path: Path, dsn: str, name: str) -> dict[str, int]:
    ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}
    path.write_text(json.dumps({  # JSON is YAML
        "listen": f"127.0.0.1:{ports['client']}",
        "admin_listen": f"127.0.0.1:{ports['admin']}",
        "admin_token_file": str(path.parent / f"{name}-admin-token"),
        "metrics_listen": f"127.0.0.1:{ports['metrics']}",
        "agent_listen": f"127.0.0.1:{ports['agent']}",
        "agent_insecure": True,
        "store": {"dsn": dsn},
        "auth": {"keys_required": False},
        "control": {"reconcile_interval": "1s"},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}}],
    }))
    return ports


def get(url: str, body: dict | None = None, timeout: float = 5) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.load(exc)
        except ValueError:
            return exc.code, {}
    except (urllib.error.URLError, OSError):
        return 0, {}


def wait_until(check, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def answers(ports: dict[str, int]) -> bool:
    status, body = get(f"http://127.0.0.1:{ports['client']}/v1/chat/completions",
                       {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    return status == 200 and bool(body.get("choices"))


def leads(ports: dict[str, int]) -> bool:
    return get(f"http://127.0.0.1:{ports['client']}/leader")[0] == 200


def test_a_standby_on_postgresql_takes_over_and_the_agent_follows(tmp_path, postgres_server):
    dsn = postgres_server.dsn(postgres_server.create_database())
    a_ports = write_server(tmp_path / "a.yaml", dsn, "a")
    b_ports = write_server(tmp_path / "b.yaml", dsn, "b")
    (tmp_path / "agent.yaml").write_text(json.dumps({
        "node_id": "node-1", "insecure": True, "engine_host": "127.0.0.1", "engine_user": "",
        "control_planes": [f"127.0.0.1:{a_ports['agent']}", f"127.0.0.1:{b_ports['agent']}"],
        "state_dir": str(tmp_path / "agent"), "weights_dir": str(tmp_path / "agent" / "w"),
        "engines_dir": str(tmp_path / "agent" / "e"),
    }))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def start(*args: str, log: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "llmgw", *args], env=env,
                                stdout=open(tmp_path / log, "wb"), stderr=subprocess.STDOUT)

    procs: list[subprocess.Popen] = []
    engines: list[int] = []
    try:
        a = start("server", "--config", str(tmp_path / "a.yaml"), log="a.log")
        procs.append(a)
        wait_until(lambda: leads(a_ports), 30, "the first control plane leading")
        b = start("server", "--config", str(tmp_path / "b.yaml"), log="b.log")
        procs.append(b)
        wait_until(lambda: get(f"http://127.0.0.1:{b_ports['client']}/leader")[0] == 503, 30, "the standby up")
        _, body = get(f"http://127.0.0.1:{b_ports['client']}/leader")
        assert body["leader"] is False and body["holder"].startswith(f"127.0.0.1:{a_ports['agent']}")
        agent = start("agent", "--config", str(tmp_path / "agent.yaml"), log="agent.log")
        procs.append(agent)
        wait_until(lambda: answers(a_ports), 60, "an answer through the leader")
        engines = descendants(agent.pid)
        assert engines, "the agent runs an engine"

        a.send_signal(signal.SIGKILL)
        a.wait(10)
        took = wait_until(lambda: leads(b_ports), 30, "the standby taking over")
        wait_until(lambda: answers(b_ports), 30, "an answer through the new leader")
        # The engine was adopted by the new leader, not started again.
        assert descendants(agent.pid) == engines, (took, (tmp_path / "agent.log").read_text()[-3000:])
        assert all(p.poll() is None for p in procs[1:])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for pid in engines:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
