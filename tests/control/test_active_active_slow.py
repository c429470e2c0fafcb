"""Active-active gateways as an operator runs them: two `llmgw server` on one PostgreSQL, one `llmgw agent`,
clients through the official openai SDK spread round-robin over both (as a load balancer would).

Both answer; a model added at run time on the leader is served by the standby; the usage rows of both land in
the one store; a standby cut off from the store past its bound refuses in words, and serves again when it is
back; kill -9 of the leader: the standby serves on through its take-over (the requests that failed are
counted and printed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from llmgw.up.procs import descendants

from .test_failover_slow import free_port, get, wait_until

pytestmark = pytest.mark.slow

LEASE_TTL = 3  # seconds: a standby serves from a copy at most 6 s old, and takes over within 4 s


class CuttableProxy:
    """A TCP proxy in front of PostgreSQL for one control plane: `cut()` drops its connections and refuses
    new ones (the store is unreachable from there), `mend()` lets it through again."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = free_port()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._cut = False
        self.mend()

    def mend(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        with self._lock:
            self._cut = False
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            self._cut = True  # a connection accepted before the close but not yet recorded is closed too
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._cut:
                    client.close()
                    server.close()
                    continue
                self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def write_server(path: Path, dsn: str, name: str) -> dict[str, int]:
    ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}
    path.write_text(json.dumps({  # JSON is YAML
        "listen": f"127.0.0.1:{ports['client']}",
        "admin_listen": f"127.0.0.1:{ports['admin']}",
        "admin_token_file": str(path.parent / "admin-token"),  # one token for both, as one cluster
        "metrics_listen": f"127.0.0.1:{ports['metrics']}",
        "agent_listen": f"127.0.0.1:{ports['agent']}",
        "agent_insecure": True,
        "store": {"dsn": dsn},
        "auth": {"keys_required": False},
        "control": {"reconcile_interval": "1s", "lease_ttl": f"{LEASE_TTL}s"},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}},
                   {"name": "lazy", "engine": "sim", "profiles": [{"name": "cpu"}],
                    "scaling": {"min": 0, "max": 1, "on_demand": True}}],
    }))
    return ports


def client_for(ports: dict[str, int]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{ports['client']}/v1", api_key="none", max_retries=0,
                         timeout=10)


def ask(client: openai.OpenAI, model: str = "tiny") -> str:
    """One chat answer through the SDK; returns the usage record's id (x-llmgw-request-id)."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    answer = raw.parse()
    assert answer.choices and answer.choices[0].message.content is not None
    return raw.headers["x-llmgw-request-id"]


def answers(client: openai.OpenAI, model: str = "tiny") -> bool:
    try:
        ask(client, model)
        return True
    except (openai.APIConnectionError, openai.APIStatusError):
        return False


def admin_post(ports: dict[str, int], token: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{ports['admin']}/api/v1{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def metric(ports: dict[str, int], name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_two_control_planes_both_serve_and_the_standby_serves_on_when_the_leader_dies(tmp_path, postgres_server):
    database = postgres_server.create_database()
    dsn = postgres_server.dsn(database)
    proxy = CuttableProxy(postgres_server.port)
    a_ports = write_server(tmp_path / "a.yaml", dsn, "a")
    b_ports = write_server(tmp_path / "b.yaml", f"postgres://{postgres_server.user}@127.0.0.1:{proxy.port}/{database}",
                           "b")
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

    def logs() -> str:
        return "\n".join(f"--- {n}\n" + (tmp_path / n).read_text(errors="replace")[-2500:]
                         for n in ("a.log", "b.log", "agent.log") if (tmp_path / n).exists())

    procs: list[subprocess.Popen] = []
    engines: list[int] = []
    a_client, b_client = client_for(a_ports), client_for(b_ports)
    try:
        a = start("server", "--config", str(tmp_path / "a.yaml"), log="a.log")
        procs.append(a)
        wait_until(lambda: get(f"http://127.0.0.1:{a_ports['client']}/leader")[0] == 200, 30, "A leading")
        b = start("server", "--config", str(tmp_path / "b.yaml"), log="b.log")
        procs.append(b)
        wait_until(lambda: get(f"http://127.0.0.1:{b_ports['client']}/leader")[0] == 503, 30, "B up as a standby")
        agent = start("agent", "--config", str(tmp_path / "agent.yaml"), log="agent.log")
        procs.append(agent)
        wait_until(lambda: answers(a_client), 60, "an answer through the leader")

        # The standby answers too, from the leader's replica set: no "no replica is serving".
        try:
            wait_until(lambda: answers(b_client), 15, "an answer through the standby")
        except AssertionError:
            raise AssertionError(logs()) from None
        status, leader_b = get(f"http://127.0.0.1:{b_ports['client']}/leader")
        assert status == 503 and leader_b["role"] == "standby"
        view = leader_b["replica_view"]
        assert view["stale"] is False and view["copied"] == 1 and view["age_s"] < LEASE_TTL * 2
        assert view["from"].startswith(f"127.0.0.1:{a_ports['agent']}")
        assert get(f"http://127.0.0.1:{b_ports['client']}/ready")[0] == 200  # a load balancer's health check
        _, health_b = get(f"http://127.0.0.1:{b_ports['client']}/health")
        assert health_b["status"] == "ok" and health_b["role"] == "standby"
        assert get(f"http://127.0.0.1:{a_ports['client']}/health")[1]["role"] == "leader"
        assert metric(b_ports, "llmgw_replica_view_age_seconds") < LEASE_TTL * 2
        assert metric(b_ports, "llmgw_replica_view_stale") == 0 and metric(a_ports, "llmgw_leader") == 1
        assert metric(a_ports, "llmgw_replica_view_age_seconds") == 0 and metric(b_ports, "llmgw_leader") == 0

        # Round-robin over both through the SDK: every request answered, by both.
        ids: dict[str, list[str]] = {"a": [], "b": []}
        for i in range(20):
            name, client = ("a", a_client) if i % 2 == 0 else ("b", b_client)
            ids[name].append(ask(client))
        assert len(ids["a"]) == len(ids["b"]) == 10

        # A model added at run time on the leader is served by the standby.
        token = (tmp_path / "admin-token").read_text().strip()
        status, body = admin_post(a_ports, token, "/models", {
            "name": "tiny-two", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}})
        assert status in (200, 201), body
        wait_until(lambda: answers(a_client, "tiny-two"), 60, "the new model through the leader")
        wait_until(lambda: answers(b_client, "tiny-two"), 15, "the new model through the standby")
        ids["b"].append(ask(b_client, "tiny-two"))

        # An on-demand model nothing runs yet, asked for through the standby first: the leader starts it, and
        # the standby's request waits for it and is answered.
        lazy_client = openai.OpenAI(base_url=f"http://127.0.0.1:{b_ports['client']}/v1", api_key="none",
                                    max_retries=0, timeout=60)
        asked = time.monotonic()
        ids["b"].append(ask(lazy_client, "lazy"))
        print(f"\nan on-demand model's first request, through the standby: answered in {time.monotonic() - asked:.1f} s")

        # The usage rows of both gateways are in the one store.
        from llmgw.store import open_store

        async def rows_found() -> dict[str, int]:
            store = await open_store(dsn)
            try:
                return {k: sum([await store.get_usage(i) is not None for i in v]) for k, v in ids.items()}
            finally:
                await store.close()

        wait_until(lambda: asyncio.run(rows_found()) == {"a": 10, "b": 12}, 20, "every usage row in the store")

        # The standby cut off from the store: it serves from its copy for up to twice the lease's TTL, then
        # refuses in words rather than send to replicas that may be gone; mended, it serves again.
        proxy.cut()
        cut_at = time.monotonic()
        refused: list[str] = []
        seen: list[str] = []

        def refuses() -> bool:
            try:
                ask(b_client)
                seen.append("200")
            except openai.APIStatusError as exc:
                seen.append(f"{exc.status_code} {exc.message}"[:200])
                if exc.status_code == 503:
                    refused.append(exc.message)
                    return True
            except openai.APIConnectionError as exc:
                seen.append(f"{type(exc).__name__} {exc}"[:200])
            return False

        try:
            wait_until(refuses, LEASE_TTL * 2 + 10, "the cut-off standby refusing")
        except AssertionError:
            raise AssertionError((seen[-5:], logs())) from None
        assert time.monotonic() - cut_at >= LEASE_TTL * 2 - 1  # not before its bound
        assert "standby" in refused[0] and "old" in refused[0] and "store has not answered" in refused[0], refused
        assert metric(b_ports, "llmgw_replica_view_stale") == 1
        assert get(f"http://127.0.0.1:{b_ports['client']}/ready")[0] == 503  # the load balancer takes it out
        _, leader_b = get(f"http://127.0.0.1:{b_ports['client']}/leader")
        assert leader_b["replica_view"]["stale"] is True and leader_b["replica_view"]["error"]
        proxy.mend()
        wait_until(lambda: answers(b_client), 30, "the standby serving again once the store is back")

        # kill -9 the leader under round-robin load: the standby serves on through its take-over.
        outcomes: list[tuple[str, float, str]] = []  # (gateway, when, "" or the error)
        stop = threading.Event()

        def load() -> None:
            i = 0
            while not stop.is_set():
                name, client = ("a", a_client) if i % 2 == 0 else ("b", b_client)
                i += 1
                try:
                    ask(client)
                    outcomes.append((name, time.monotonic(), ""))
                except (openai.APIConnectionError, openai.APIStatusError) as exc:
                    outcomes.append((name, time.monotonic(), f"{type(exc).__name__}: {exc}"[:300]))
                    time.sleep(0.05)

        engines = descendants(agent.pid)  # tiny's, tiny-two's and lazy's
        assert len(engines) == 3
        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        time.sleep(2)
        a.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        a.wait(10)
        took = wait_until(lambda: get(f"http://127.0.0.1:{b_ports['client']}/leader")[0] == 200, 30,
                          "B taking over")
        time.sleep(LEASE_TTL * 2 + 15)  # past the adoption grace: the replica is the new leader's own by then
        stop.set()
        loader.join(30)
        after = [o for o in outcomes if o[0] == "b" and o[1] >= killed_at]
        failed = [o for o in after if o[2]]
        to_a = [o for o in outcomes if o[0] == "a" and o[1] >= killed_at]
        print(f"\nkill -9 of the leader: B took the lease {took:.1f} s later; of {len(after)} requests sent to B "
              f"from the kill on, {len(failed)} failed: {[f[2] for f in failed][:5]}; the {len(to_a)} sent to the "
              f"dead A failed to connect ({sum(1 for o in to_a if o[2])} of them), as a load balancer's health "
              "check would take it out")
        assert after and not failed, (failed[:5], logs())
        assert to_a and all(o[2].startswith("APIConnectionError") for o in to_a if o[1] > killed_at + 1)
        # The engine was adopted by the new leader, not started again, and B still answers as the leader.
        assert descendants(agent.pid) == engines
        assert answers(b_client)
        _, leader_b = get(f"http://127.0.0.1:{b_ports['client']}/leader")
        assert leader_b["role"] == "leader" and leader_b["replica_view"]["copied"] == 0
    finally:
        proxy.cut()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for pid in engines:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
