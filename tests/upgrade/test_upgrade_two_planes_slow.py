"""The issue's upgrade, end to end on two control planes: two `llmgw server` processes on one PostgreSQL and a
real agent, each run from its own copy of llmgw's zipapp, a sim engine serving. The standby is upgraded
(`llmgw self-upgrade`, then restarted), then the leader (its lease given up as it stops, the upgraded standby
leading at once), then the agent (`llmgw ctl upgrade` through the new leader). A client asks all along through
the first control plane's gateway, and through the other's when that one does not answer (as a load balancer
does); the engine is never restarted; the new version is reported everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from upgrade_helpers import PY, cached_pyz, children, ctl, free_port, make_key, release_folder, restamp_zipapp

from llmgw.agent.self_upgrade import zipapp_version
from llmgw.release.store import add_release

pytestmark = pytest.mark.slow

NEXT = "0.1.0.post1"
#: the control plane's side too: the cached zipapp must hold it as the tree does
PLANE_FILES = ("llmgw/control/upgrade.py", "llmgw/cli/self_upgrade_cmd.py", "llmgw/control/service.py")


def http(url: str, body: dict | None = None, token: str = "", timeout: float = 10) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except Exception:  # noqa: BLE001 - not answering, in any way
        return 0, {}


class BalancedLoad:
    """A client asking every 50 ms through gateway A, and through B when A does not answer; counts each outcome."""

    def __init__(self, a: str, b: str) -> None:
        import threading

        self.urls = (a, b)
        self.ok = self.other = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ask(self, url: str) -> bool:
        status, body = http(url, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        return status == 200 and bool(body.get("choices"))

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._ask(self.urls[0]):
                self.ok += 1
            elif self._ask(self.urls[1]):
                self.other += 1
            else:
                self.failed.append(time.strftime("%H:%M:%S"))
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(20)


def wait_until(check, timeout: float, what: str, said=lambda: "") -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{said()}")


def test_standby_then_leader_then_agent_upgraded_under_load_engine_kept(tmp_path, postgres_server):
    first = cached_pyz(PLANE_FILES)
    base = zipapp_version(first)
    private, trust, public = make_key(tmp_path / "keys")
    second = restamp_zipapp(first, tmp_path / "second.pyz", NEXT)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    add_release(mirror, release_folder(tmp_path / "rel", NEXT, private, zipapps={"x86_64": second}), trust)
    second.unlink()
    dsn = postgres_server.dsn(postgres_server.create_database())
    mport = free_port()
    ports = {n: {k: free_port() for k in ("client", "admin", "agent")} for n in ("a", "b")}
    programs = {}
    for name in ("a", "b", "node"):
        (tmp_path / name).mkdir()
        programs[name] = tmp_path / name / "llmgw.pyz"
        shutil.copyfile(first, programs[name])
        programs[name].chmod(0o755)
    for n, p in ports.items():
        (tmp_path / f"{n}.yaml").write_text(json.dumps({
            "listen": f"127.0.0.1:{p['client']}", "admin_listen": f"127.0.0.1:{p['admin']}",
            "admin_token_file": str(tmp_path / "admin-token"), "metrics_listen": "",
            "agent_listen": f"127.0.0.1:{p['agent']}", "agent_insecure": True, "store": {"dsn": dsn},
            "auth": {"keys_required": False}, "control": {"reconcile_interval": "1s"},
            "mirror": {"url": f"http://127.0.0.1:{mport}"}, "releases": {"trusted_keys": [public]},
            "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}],
                        "scaling": {"min": 1, "max": 1}}]}))
    engine_ports = 30000 + (os.getpid() + 7) % 20000
    (tmp_path / "agent.yaml").write_text(json.dumps({
        "node_id": "node-1", "insecure": True, "engine_host": "127.0.0.1", "engine_user": "",
        "engine_ports": f"{engine_ports}-{engine_ports + 20}",
        "control_planes": [f"127.0.0.1:{p['agent']}" for p in ports.values()],
        "state_dir": str(tmp_path / "agent"), "weights_dir": str(tmp_path / "agent" / "w"),
        "engines_dir": str(tmp_path / "agent" / "e"), "releases": {"trusted_keys": [public]}}))
    env = dict(os.environ, SHIV_ROOT=str(tmp_path / "unpacked"), PYTHONUNBUFFERED="1")
    env.pop("LLMGW_PYZ", None)
    procs: dict[str, subprocess.Popen] = {}
    engines: set[int] = set()

    def start(name: str, *argv) -> subprocess.Popen:
        program = [programs[name]] if name in programs else ["-m", "llmgw"]
        procs[name] = subprocess.Popen([PY, *program, *map(str, argv)], env=env, stderr=subprocess.STDOUT,
                                       stdout=open(tmp_path / f"{name}.log", "ab"))
        return procs[name]

    def said() -> str:
        return "\n".join(f"--- {n}.log\n" + (tmp_path / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in ("a", "b", "node") if (tmp_path / f"{n}.log").exists())

    def leads(n: str) -> bool:
        return http(f"http://127.0.0.1:{ports[n]['client']}/leader")[0] == 200

    def standby(n: str) -> bool:
        return http(f"http://127.0.0.1:{ports[n]['client']}/leader")[0] == 503

    def version(n: str) -> str:
        token = (tmp_path / "admin-token").read_text().strip()
        return http(f"http://127.0.0.1:{ports[n]['admin']}/api/v1/summary", token=token)[1].get("version", "")

    def restart(n: str) -> None:
        procs[n].send_signal(signal.SIGTERM)
        procs[n].wait(60)
        start(n, "server", "--config", tmp_path / f"{n}.yaml")

    try:
        start("mirror", "mirror", "serve", "--dir", mirror, "--listen", f"127.0.0.1:{mport}", "--base",
              f"http://127.0.0.1:{mport}", "--api-listen", "")
        start("a", "server", "--config", tmp_path / "a.yaml")
        wait_until(lambda: leads("a"), 60, "a leading", said)
        start("b", "server", "--config", tmp_path / "b.yaml")
        wait_until(lambda: standby("b"), 60, "b a standby", said)
        agent = start("node", "agent", "--config", tmp_path / "agent.yaml")
        load = BalancedLoad(*(f"http://127.0.0.1:{ports[n]['client']}/v1/chat/completions" for n in ("a", "b")))
        wait_until(lambda: load._ask(load.urls[0]), 120, "tiny answering through a", said)
        engines = children(agent.pid)
        assert engines and version("a") == version("b") == base
        admin_b = ["--admin", f"http://127.0.0.1:{ports['b']['admin']}", "--token-file", tmp_path / "admin-token"]
        timings = {}
        with load:
            # 1. the standby: its file replaced, then restarted; it comes back a standby on the new version
            done = subprocess.run([PY, programs["b"], "self-upgrade", NEXT, "--config", tmp_path / "b.yaml",
                                   "--program", programs["b"]], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            restart("b")
            wait_until(lambda: standby("b") and version("b") == NEXT, 90, "b back as a standby on NEXT", said)
            # 2. the leader: replaced, stopped (its lease given up), the upgraded standby leads at once
            done = subprocess.run([PY, programs["a"], "self-upgrade", NEXT, "--config", tmp_path / "a.yaml",
                                   "--program", programs["a"]], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            stopped = time.monotonic()
            procs["a"].send_signal(signal.SIGTERM)
            timings["hand-over"] = wait_until(lambda: leads("b"), 60, "b taking the lease", said)
            procs["a"].wait(60)
            timings["a stopped"] = time.monotonic() - stopped
            start("a", "server", "--config", tmp_path / "a.yaml")
            wait_until(lambda: standby("a") and version("a") == NEXT, 90, "a back as a standby on NEXT", said)
            wait_until(lambda: json.loads(ctl("nodes", "--json", *admin_b).stdout)["nodes"][0]["state"] == "ready",
                       60, "node-1 registered with b", said)
            # 3. the agent, through the new leader
            upgraded = ctl("upgrade", NEXT, *admin_b)
            time.sleep(2)
        assert "node-1: back with llmgw 0.1.0.post1" in upgraded.stdout, upgraded.stdout + said()
        [node] = json.loads(ctl("nodes", "--json", *admin_b).stdout)["nodes"]
        assert node["agent_version"] == NEXT and version("a") == version("b") == NEXT
        assert leads("b") and standby("a")
        assert agent.poll() is None and children(agent.pid) == engines  # never restarted: the same pids
        print(f"hand-over {timings['hand-over']:.1f} s; answered through a: {load.ok}, through b when a did not: "
              f"{load.other}, failed: {len(load.failed)} {load.failed[:10]}")
        assert load.ok > 0 and load.other > 0
        assert len(load.failed) <= 3, load.failed
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        for pid in engines:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
