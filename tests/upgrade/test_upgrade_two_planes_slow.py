"""The issue's upgrade, end to end: two `llmgw server` processes on one PostgreSQL and two real agents, each run
from its own copy of llmgw's zipapp, a sim engine serving on each node, a client asking all along through both
gateways. One `llmgw ctl upgrade` does it all: the standby replaces itself and starts again, the leader replaces
itself, hands its lease to the upgraded standby (given up and taken at once, not left to lapse) and starts again,
and the new leader carries the job on through both agents. Every part then reports the new version, no engine
was restarted, and a release signed by a key nobody trusts was refused first with nothing changed.

The second build is the first zipapp re-stamped with a new version (upgrade_helpers.restamp_zipapp): a second
`build.py` run installs every dependency again for each CPython it targets and writes another 150 MB file,
minutes of this machine's two cores, for what an upgrade needs of it: another file saying another version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from upgrade_helpers import (PY, cached_pyz, children, ctl, free_port, make_key, release_folder, restamp_zipapp,
                             tiny_zipapp)

from llmgw.agent.self_upgrade import zipapp_version
from llmgw.release.store import add_release

pytestmark = pytest.mark.slow

#: the control plane's side too: the cached zipapp must hold it as the tree does
PLANE_FILES = ("llmgw/control/upgrade.py", "llmgw/control/plane_upgrade.py",
               "llmgw/server/run.py", "llmgw/cli/server_cmd.py", "llmgw/control/admin_cluster.py")
MODELS = {"tiny": "a", "small": "b"}  #: model -> the pool label of the node it runs on


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
    """A client asking every 50 ms, each model in turn, through gateway A, and through B when A does not answer
    (as a load balancer does); counts each outcome, and when A did not answer."""

    def __init__(self, a: str, b: str) -> None:
        self.urls = (a, b)
        self.ok = self.other = 0
        self.failed: list[str] = []
        self.a_missed: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def ask(self, url: str, model: str) -> bool:
        status, body = http(url, {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        return status == 200 and bool(body.get("choices"))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            model = list(MODELS)[n % len(MODELS)]
            n += 1
            if self.ask(self.urls[0], model):
                self.ok += 1
            else:
                self.a_missed.append(time.time())
                if self.ask(self.urls[1], model):
                    self.other += 1
                else:
                    self.failed.append(f"{time.strftime('%H:%M:%S')} {model}")
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


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_one_ctl_upgrade_moves_both_control_planes_and_both_agents_under_load(tmp_path, postgres_server):
    first = cached_pyz(PLANE_FILES)
    base = zipapp_version(first)
    nxt = f"{base}.post1"
    private, trust, public = make_key(tmp_path / "keys")
    stranger, stranger_trust, _ = make_key(tmp_path / "stranger")
    second = restamp_zipapp(first, tmp_path / "second.pyz", nxt)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    add_release(mirror, release_folder(tmp_path / "rel", nxt, private, zipapps={"x86_64": second}), trust)
    second.unlink()
    unknown = tiny_zipapp(tmp_path / "unknown.pyz", "9.9.9")
    add_release(mirror, release_folder(tmp_path / "bad", "9.9.9", stranger, zipapps={"x86_64": unknown}),
                stranger_trust)
    dsn = postgres_server.dsn(postgres_server.create_database())
    mport = free_port()
    ports = {n: {k: free_port() for k in ("client", "admin", "agent")} for n in ("a", "b")}
    programs = {}
    for name in ("a", "b", "node-1", "node-2"):
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
            "models": [{"name": m, "engine": "sim", "profiles": [{"name": "cpu", "node_selector": {"pool": pool}}],
                        "scaling": {"min": 1, "max": 1}} for m, pool in MODELS.items()]}))
    for i, node in enumerate(("node-1", "node-2")):
        engine_ports = 30000 + (os.getpid() * 2 + i * 7919) % 20000
        (tmp_path / f"{node}.yaml").write_text(json.dumps({
            "node_id": node, "insecure": True, "engine_host": "127.0.0.1", "engine_user": "",
            "engine_ports": f"{engine_ports}-{engine_ports + 20}", "labels": {"pool": "ab"[i]},
            "control_planes": [f"127.0.0.1:{p['agent']}" for p in ports.values()],
            "state_dir": str(tmp_path / node / "state"), "weights_dir": str(tmp_path / node / "w"),
            "engines_dir": str(tmp_path / node / "e"), "releases": {"trusted_keys": [public]}}))
    env = dict(os.environ, SHIV_ROOT=str(tmp_path / "unpacked"), PYTHONUNBUFFERED="1")
    env.pop("LLMGW_PYZ", None)
    procs: dict[str, subprocess.Popen] = {}
    engines: dict[str, set[int]] = {}

    def start(name: str, *argv) -> subprocess.Popen:
        program = [programs[name]] if name in programs else ["-m", "llmgw"]
        own = dict(env)
        if name in ports:  # each control plane its own state folder, as on its own machine
            (tmp_path / name / "state").mkdir(exist_ok=True)
            own["LLMGW_STATE_DIR"] = str(tmp_path / name / "state")
        procs[name] = subprocess.Popen([PY, *program, *map(str, argv)], env=own, stderr=subprocess.STDOUT,
                                       stdout=open(tmp_path / f"{name}.log", "ab"))
        return procs[name]

    def said() -> str:
        return "\n".join(f"--- {n}.log\n" + (tmp_path / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in ("a", "b", "node-1", "node-2") if (tmp_path / f"{n}.log").exists())

    def leads(n: str) -> bool:
        return http(f"http://127.0.0.1:{ports[n]['client']}/leader")[0] == 200

    def standby(n: str) -> bool:
        return http(f"http://127.0.0.1:{ports[n]['client']}/leader")[0] == 503

    def version(n: str) -> str:
        token = (tmp_path / "admin-token").read_text().strip()
        return http(f"http://127.0.0.1:{ports[n]['admin']}/api/v1/summary", token=token)[1].get("version", "")

    def admin(n: str) -> list:
        return ["--admin", f"http://127.0.0.1:{ports[n]['admin']}", "--token-file", tmp_path / "admin-token"]

    def nodes(n: str) -> dict[str, dict]:
        done = ctl("nodes", "--json", *admin(n), check=False)
        return {d["id"]: d for d in json.loads(done.stdout)["nodes"]} if done.returncode == 0 else {}

    try:
        start("mirror", "mirror", "serve", "--dir", mirror, "--listen", f"127.0.0.1:{mport}", "--base",
              f"http://127.0.0.1:{mport}", "--api-listen", "")
        start("a", "server", "--config", tmp_path / "a.yaml")
        wait_until(lambda: leads("a"), 60, "a leading", said)
        start("b", "server", "--config", tmp_path / "b.yaml")
        wait_until(lambda: standby("b"), 60, "b a standby", said)
        agents = {node: start(node, "agent", "--config", tmp_path / f"{node}.yaml") for node in ("node-1", "node-2")}
        load = BalancedLoad(*(f"http://127.0.0.1:{ports[n]['client']}/v1/chat/completions" for n in ("a", "b")))
        for model in MODELS:
            wait_until(lambda: load.ask(load.urls[0], model), 120, f"{model} answering through a", said)
        engines = {node: children(agent.pid) for node, agent in agents.items()}
        assert all(engines.values()), engines  # a sim engine on each node
        assert version("a") == version("b") == base

        # a release signed by a key nobody trusts: refused before anything is sent, nothing changes
        refused = ctl("upgrade", "9.9.9", *admin("a"), check=False)
        assert refused.returncode == 2 and "not trusted" in refused.stderr, refused.stdout + refused.stderr
        assert {n: sha(p) for n, p in programs.items()} == {n: sha(first) for n in programs}
        assert version("a") == version("b") == base and leads("a")
        assert {n: d["agent_version"] for n, d in nodes("a").items()} == {"node-1": base, "node-2": base}

        with load:
            time.sleep(1)
            started = time.time()
            try:
                upgraded = ctl("upgrade", nxt, *admin("a"), timeout=300)
            except subprocess.TimeoutExpired as exc:
                raise AssertionError(f"ctl upgrade did not end:\n{exc.stdout}\n{exc.stderr}\n{said()}") from None
            took = time.time() - started
            time.sleep(2)
        out = upgraded.stdout
        steps = [line.strip() for line in out.splitlines()]
        assert any(f"(standby, llmgw {base}): asked to upgrade to {nxt}" in s for s in steps), out + said()
        assert any(f"back as a standby with llmgw {nxt} (was {base}) in" in s for s in steps), out
        handed = next(s for s in steps if "handed its lease over (taken" in s)
        taken = float(handed.split("(taken ")[1].split(" s")[0])
        assert taken < 5.0, handed  # handed over: the lease's TTL is 15 s, a lapse would take that long
        assert sum(f"back with llmgw {nxt} (was {base})" in s and "1 engine kept, same pids" in s
                   for s in steps) == 2, out
        assert steps[-1].endswith(f"done: the control planes and 2 node(s) upgraded; the agents run llmgw {nxt}"), out

        wait_until(lambda: version("a") == nxt and version("b") == nxt, 60, "both control planes on the release")
        assert leads("b") and standby("a")
        assert {n: d["agent_version"] for n, d in nodes("b").items()} == {"node-1": nxt, "node-2": nxt}
        assert all(zipapp_version(p) == nxt for p in programs.values())
        for node, agent in agents.items():  # each agent the same process, its engine never restarted
            assert agent.poll() is None and children(agent.pid) == engines[node], node
        print(out)
        print(f"ctl upgrade took {took:.1f} s; the lease taken {taken:.1f} s after it was given up; answered "
              f"through a: {load.ok}, through b when a did not answer: {load.other}, failed: {len(load.failed)} "
              f"{load.failed[:10]}")
        assert load.ok > 0 and load.other > 0
        assert len(load.failed) <= 3, load.failed

        # and back, in the reverse order: the agents, then the standby (a), then the leader (b) handing its lease
        # to a, which ends the job
        try:
            back = ctl("upgrade", "--back", *admin("b"), timeout=300)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"ctl upgrade --back did not end:\n{exc.stdout}\n{exc.stderr}\n{said()}") from None
        steps = [line.strip() for line in back.stdout.splitlines()]
        assert sum(f"back with llmgw {base} (was {nxt})" in s and "1 engine kept, same pids" in s
                   for s in steps) == 2, back.stdout + said()
        assert any(f"back as a standby with llmgw {base} (was {nxt})" in s for s in steps), back.stdout
        assert any("handed its lease over (taken" in s for s in steps), back.stdout
        assert steps[-1].endswith(f"done: 2 node(s) and the control planes went back; the control planes run llmgw "
                                  f"{base}; the agents run llmgw {base}"), back.stdout
        wait_until(lambda: version("a") == base and version("b") == base, 60, "both control planes back")
        assert leads("a") and standby("b")
        assert {n: d["agent_version"] for n, d in nodes("a").items()} == {"node-1": base, "node-2": base}
        assert all(zipapp_version(p) == base for p in programs.values())
        for node, agent in agents.items():
            assert agent.poll() is None and children(agent.pid) == engines[node], node
        print(back.stdout)
    finally:
        keep = os.environ.get("LLMGW_TEST_KEEP_LOGS")  # a folder to copy the processes' logs to, to read after
        if keep:
            shutil.copytree(tmp_path, keep, ignore=shutil.ignore_patterns("unpacked", "*.pyz*", "mirror", "w", "e"),
                            dirs_exist_ok=True)
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        for pids in engines.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
