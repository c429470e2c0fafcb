"""A real replicated store from `llmgw server init --patroni`: the files it writes start, as processes on loopback
ports, a one-member etcd and two PostgreSQL members under Patroni, all on TLS from llmgw's CA. An `llmgw server`
on the multi-host address it wrote serves a model (the sim engine, forwarded) under load from the openai SDK
while the cluster is switched over (Patroni's REST API) and then failed over (kill -9 of the primary's Patroni
and PostgreSQL, as a machine that dies): every answered request has its usage row, the control plane's
leadership is kept or moves once, and client requests fail for at most a few seconds. `llmgw doctor` and the
server's metrics name the members' roles before and after."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import asyncpg
import openai
import pytest

from llmgw.pki import init_ca
from llmgw.store import open_store
from tests.conftest import find_postgres_bin, free_port
from tests.obs.scrape import samples, value
from tests.server.serving import project_key

pytestmark = pytest.mark.slow

MEMBERS = ("pg1", "pg2")


def env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {k: v for k, v in pairs}


class Cluster:
    """The files `llmgw server init --patroni` wrote, run as processes."""

    def __init__(self, base: Path, as_postgres: bool) -> None:
        self.base, self.out = base, base / "out"
        self.as_postgres = as_postgres
        self.ports = {m: (free_port(), free_port()) for m in MEMBERS}
        self.etcd_ports = (free_port(), free_port())
        self.procs: dict[str, subprocess.Popen] = {}

    def init(self) -> subprocess.CompletedProcess:
        init_ca(self.base / "ca")
        members = ",".join(f"{m}=127.0.0.1:{pg}:{api}" for m, (pg, api) in self.ports.items())
        return subprocess.run(
            [sys.executable, "-m", "llmgw", "server", "init", "--patroni", "--members", members,
             "--etcd", f"e1=127.0.0.1:{self.etcd_ports[0]}:{self.etcd_ports[1]}", "--out", str(self.out),
             "--ca", str(self.base / "ca"), "--client-ca", str(self.base / "ca" / "ca.pem"),
             "--config-dir", f"{self.out}/{{member}}/patroni", "--etcd-config-dir", f"{self.out}/{{member}}/etcd",
             "--data-dir", f"{self.base}/data/{{member}}", "--etcd-data-dir", f"{self.base}/data/etcd",
             "--socket-dir", f"{self.out}/{{member}}", "--ttl", "10", "--loop-wait", "2", "--retry-timeout", "3"],
            capture_output=True, text=True, timeout=60)

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        if self.as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        self.procs[name] = subprocess.Popen(argv, env={**os.environ, **env}, stdout=open(self.base / f"{name}.log", "wb"),
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> None:
        (self.base / "data").mkdir()
        if self.as_postgres:
            account = pwd.getpwnam("postgres")
            for path in [self.base, *self.base.rglob("*")]:
                os.chown(path, account.pw_uid, account.pw_gid)
        self._start("etcd", ["etcd"], env_file(self.out / "e1" / "etcd" / "etcd.env"))
        for m in MEMBERS:
            self.start_member(m)

    def start_member(self, m: str) -> None:
        self._start(m, ["patroni", str(self.config(m))], env_file(self.out / m / "patroni" / "patroni.env"))

    def config(self, m: str) -> Path:
        return self.out / m / "patroni" / "patroni.yml"

    def _tls(self) -> ssl.SSLContext:
        tls = self.out / MEMBERS[0] / "patroni" / "tls"
        context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
        context.load_cert_chain(str(tls / "member.pem"), str(tls / "member-key.pem"))
        return context

    def api(self, m: str, path: str, body: dict | None = None) -> tuple[int, dict | str]:
        """Patroni's REST API on member `m`, with the member's certificate (and its password to change things)."""
        secrets = env_file(self.out / m / "patroni" / "patroni.env")
        auth = base64.b64encode(f"{secrets['PATRONI_RESTAPI_USERNAME']}:{secrets['PATRONI_RESTAPI_PASSWORD']}".encode())
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.ports[m][1]}{path}", data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Basic {auth.decode()}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5, context=self._tls()) as resp:
                text = resp.read().decode()
                return resp.status, json.loads(text) if text.startswith("{") else text
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError):
            return 0, ""

    def roles(self) -> dict[str, tuple[str, str]]:
        """member → (role, state), as any member that answers says."""
        for m in MEMBERS:
            status, body = self.api(m, "/cluster")
            if status == 200 and isinstance(body, dict):
                return {x["name"]: (x["role"], x["state"]) for x in body["members"]}
        return {}

    def leader(self) -> str | None:
        return next((m for m, (role, _) in self.roles().items() if role == "leader"), None)

    def healthy(self, leader: str | None = None) -> bool:
        roles = self.roles()
        return (len(roles) == len(MEMBERS) and sum(r == "leader" for r, _ in roles.values()) == 1
                and all(s in ("running", "streaming") for _, s in roles.values())
                and (leader is None or roles.get(leader, ("",))[0] == "leader"))

    def kill_member(self, m: str) -> None:
        """kill -9 of the member's Patroni and its PostgreSQL: the machine is gone."""
        postmaster = Path(f"{self.base}/data/{m}/postmaster.pid").read_text().split()[0]
        os.killpg(self.procs[m].pid, signal.SIGKILL)
        os.kill(int(postmaster), signal.SIGKILL)
        self.procs[m].wait(10)

    def stop(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None and name in MEMBERS:
                os.killpg(proc.pid, signal.SIGTERM)  # Patroni stops its PostgreSQL
        for name, proc in self.procs.items():
            if name in MEMBERS:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        for m in MEMBERS:  # a PostgreSQL whose Patroni was killed, still running
            pid_file = self.base / "data" / m / "postmaster.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for name, proc in self.procs.items():
            if name not in MEMBERS and proc.poll() is None:  # etcd, last: Patroni needed it to stop cleanly
                os.killpg(proc.pid, signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.base.glob("*.log"))


def wait_for(check, timeout: float, what: str, logs=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs()}")


@pytest.fixture
def cluster():
    missing = [b for b in ("patroni", "etcd") if shutil.which(b) is None]
    if missing or find_postgres_bin() is None:
        why = f"{' and '.join(missing) or 'PostgreSQL'} not installed: apt-get install patroni etcd-server postgresql"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI is set, so the Patroni test must run)")
        pytest.skip(why)
    as_postgres = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="llmgw-patroni-"))
    os.chmod(base, 0o755)
    c = Cluster(base, as_postgres)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


class Load:
    """Clients of the openai SDK asking the gateway without pause; each answer or failure timed."""

    def __init__(self, base_url: str, key: str, clients: int = 4) -> None:
        self.results: list[tuple[float, bool]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ask, args=(base_url, key), daemon=True) for _ in range(clients)]

    def _ask(self, base_url: str, key: str) -> None:
        client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=10)
        while not self._stop.is_set():
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
                ok = True
            except openai.OpenAIError as exc:
                ok = False
                self.errors.append(f"{time.monotonic():.1f} {type(exc).__name__}: {str(exc)[:200]}")
                time.sleep(0.05)
            self.results.append((time.monotonic(), ok))

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def since(self, t0: float) -> tuple[int, int, float]:
        """(answered, failed, seconds between the first and the last failure) after t0."""
        after = [(t, ok) for t, ok in list(self.results) if t >= t0]
        failed = [t for t, ok in after if not ok]
        return sum(ok for _, ok in after), len(failed), (failed[-1] - failed[0]) if failed else 0.0


def scrape_members(port: int) -> set[tuple[str, str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(dict(labels)["member"], dict(labels)["role"]) for (name, labels), v in samples(text).items()
            if name == "llmgw_store_member" and v == 1}


def address_members(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return value(resp.read().decode(), "llmgw_store_address_members")


def doctor_members(root: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "llmgw", "doctor", "--root", str(root), "--json"],
                          capture_output=True, text=True, timeout=60)
    findings = json.loads(done.stdout)["findings"]
    return next(f"{f['status']}: {f['message']}" for f in findings if f["check"] == "store members")


async def usage_rows(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT count(*) FROM usage")
    finally:
        await conn.close()


async def lease(dsn: str) -> tuple[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT holder, epoch FROM leases ORDER BY name LIMIT 1")
        return row["holder"], row["epoch"]
    finally:
        await conn.close()


async def test_a_switchover_and_a_failover_under_load_lose_no_usage_row(cluster, tmp_path):
    done = cluster.init()
    assert done.returncode == 0, done.stderr
    assert "store-dsn" in done.stdout and "***" in done.stdout
    for m in MEMBERS:  # the passwords and keys are the owner's only
        for secret in ("patroni/patroni.env", "patroni/llmgw-password", "patroni/tls/member-key.pem"):
            assert (cluster.out / m / secret).stat().st_mode & 0o777 == 0o600, secret
    assert (cluster.out / "store-dsn").stat().st_mode & 0o777 == 0o600
    dsn = (cluster.out / "store-dsn").read_text().strip()
    hosts = dsn.split("@")[1].split("/")[0]
    assert hosts == ",".join(f"127.0.0.1:{cluster.ports[m][0]}" for m in MEMBERS)
    assert "target_session_attrs=read-write" in dsn and "sslmode=verify-full" in dsn
    for m in MEMBERS:
        assert subprocess.run(["sh", "-n", str(cluster.out / m / "install.sh")]).returncode == 0

    cluster.start()
    started = time.monotonic()
    wait_for(cluster.healthy, 90, "a leader and a streaming standby", cluster.logs)
    bootstrapped = time.monotonic() - started
    # Patroni's API refuses a client without a certificate of the cluster CA.
    plain = ssl.create_default_context(cafile=str(cluster.out / "pg1" / "patroni" / "tls" / "ca.pem"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"https://127.0.0.1:{cluster.ports['pg1'][1]}/cluster", timeout=5, context=plain)

    # With the certificate but without the REST password, nothing that changes the cluster is done.
    tls = cluster._tls()
    request = urllib.request.Request(f"https://127.0.0.1:{cluster.ports['pg1'][1]}/switchover", method="POST",
                                     data=b'{"leader": "pg1"}', headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5, context=tls)
    assert refused.value.code == 401
    # etcd asks its clients for a certificate too.
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"https://127.0.0.1:{cluster.etcd_ports[0]}/version", timeout=5, context=plain)
    # PostgreSQL takes no connection without TLS.
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        await asyncpg.connect(dsn.split("?")[0].replace(hosts, f"127.0.0.1:{cluster.ports['pg1'][0]}"),
                              ssl=False)
    # patronictl, as the docs say, with the member's patroni.env.
    listed = subprocess.run(["patronictl", "-c", str(cluster.config("pg1")), "list"], capture_output=True, text=True,
                            env={**os.environ, **env_file(cluster.out / "pg1/patroni/patroni.env")}, timeout=30)
    assert listed.returncode == 0 and "pg1" in listed.stdout and "pg2" in listed.stdout, listed.stderr
    assert "Leader" in listed.stdout and "Replica" in listed.stdout, listed.stdout

    # A new control plane on that address, with the cluster's CA already in place, as docs/store.md says.
    plane = tmp_path / "cp1"
    (plane / "etc/llmgw").mkdir(parents=True)
    shutil.copytree(cluster.base / "ca", plane / "etc/llmgw/ca")
    made = subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--yes", "--root", str(plane), "--admin",
                           "ops@example.com", "--host", "cp1.example.com", "--store", dsn, "--no-start"],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "ca.pem: kept" in made.stdout
    assert (plane / "etc/llmgw/store-dsn").read_text().strip() == dsn

    store = await open_store(dsn)  # TLS, verify-full, through target_session_attrs
    _, _, secret = await project_key(store, "p", "k")
    await store.close()

    root = tmp_path / "root"
    (root / "etc/llmgw").mkdir(parents=True)
    # The engine in a process of its own: the test's own waits must not hold up its answers.
    engine_port = free_port()
    engine = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--model", "m", "--port", str(engine_port),
                               "--ttft", "0.005", "--tpot", "0.001"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while b"listening on" not in (line := engine.stdout.readline()):
        assert line, "the sim engine stopped before listening"
    try:
        ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}
        (root / "etc/llmgw/server.yaml").write_text(json.dumps({
            "listen": f"127.0.0.1:{ports['client']}", "admin_listen": f"127.0.0.1:{ports['admin']}",
            "admin_token_file": str(tmp_path / "admin-token"), "metrics_listen": f"127.0.0.1:{ports['metrics']}",
            "agent_listen": f"127.0.0.1:{ports['agent']}", "agent_insecure": True, "store": {"dsn": dsn},
            "accounting": {"flush_interval": "200ms"},
            "models": [{"name": "m", "endpoints": [{"url": f"http://127.0.0.1:{engine_port}/v1"}]}],
        }))
        server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config",
                                   str(root / "etc/llmgw/server.yaml")], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                  stdout=open(tmp_path / "server.log", "wb"), stderr=subprocess.STDOUT)
        loop = asyncio.get_running_loop()
        try:
            def leads() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{ports['client']}/leader", timeout=2) as r:
                        return r.status == 200
                except (urllib.error.URLError, OSError):
                    return False

            await loop.run_in_executor(None, wait_for, leads, 60, "the control plane leading",
                                       lambda: (tmp_path / "server.log").read_text()[-3000:])
            first = cluster.leader()
            other = next(m for m in MEMBERS if m != first)
            def metrics_name_both() -> bool:
                return scrape_members(ports["metrics"]) >= {("127.0.0.1", "leader"), (other, "replica")}

            await loop.run_in_executor(None, wait_for, metrics_name_both, 20, "the metrics naming leader and standby")
            before = doctor_members(root)
            assert before.startswith("ok: ") and f"replica {other}" in before and "streaming" in before, before
            holder, epoch = await lease(dsn)

            with Load(f"http://127.0.0.1:{ports['client']}/v1", secret) as load:
                await asyncio.sleep(3)
                t_switch = time.monotonic()
                status, body = cluster.api(first, "/switchover", {"leader": first, "candidate": other})
                assert status == 200, (status, body)
                await loop.run_in_executor(None, wait_for, lambda: cluster.healthy(other), 60,
                                           "the switchover done and the old primary streaming", cluster.logs)
                switch_took = time.monotonic() - t_switch
                await asyncio.sleep(3)
                switch = load.since(t_switch)

                t_fail = time.monotonic()
                cluster.kill_member(other)
                await loop.run_in_executor(None, wait_for, lambda: cluster.leader() == first, 60,
                                           f"{first} promoted after {other} died", cluster.logs)
                promoted_after = time.monotonic() - t_fail
                # With its standby gone, doctor warns: the address names two members, the primary sees no standby.
                alone = await loop.run_in_executor(None, doctor_members, root)
                # The metrics: the primary alone, where the address names two (StoreMemberMissing fires on that).
                await loop.run_in_executor(None, wait_for, lambda: scrape_members(ports["metrics"]) == {
                    ("127.0.0.1", "leader")}, 20, "the metrics naming the primary alone")
                assert address_members(ports["metrics"]) == 2
                await asyncio.sleep(2)
                fail = load.since(t_fail)
            answered = sum(ok for _, ok in load.results)
            failed = sum(not ok for _, ok in load.results)
            errors = load.errors[:5]

            # Every answered request has its row once the accountant has flushed (or its journal emptied).
            async def all_rows() -> int:
                deadline = time.monotonic() + 30
                while (rows := await usage_rows(dsn)) < answered and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                return rows

            rows = await all_rows()
            new_holder, new_epoch = await lease(dsn)
            cluster.start_member(other)  # the dead member comes back and rejoins as a standby
            await loop.run_in_executor(None, wait_for, lambda: cluster.healthy(first), 60,
                                       f"{other} back as a standby", cluster.logs)
            await loop.run_in_executor(None, wait_for, metrics_name_both, 20, "the metrics naming the new standby")
            after = doctor_members(root)
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
    finally:
        engine.kill()
        engine.wait(10)

    report = (f"bootstrap {bootstrapped:.1f} s; switchover {switch_took:.1f} s: {switch[0]} answered, {switch[1]} "
              f"failed over {switch[2]:.1f} s; failover (promoted after {promoted_after:.1f} s): {fail[0]} answered, "
              f"{fail[1]} failed over {fail[2]:.1f} s; {answered} answered, {failed} failed, {rows} usage rows; "
              f"errors {errors} (switchover at {t_switch:.1f}, kill at {t_fail:.1f}); "
              f"lease {holder}#{epoch} -> {new_holder}#{new_epoch}; "
              f"doctor before: {before}; alone: {alone}; after: {after}")
    print(report)
    keep = Path(os.environ.get("LLMGW_TEST_REPORT_DIR", tmp_path))  # CI keeps what is there
    (keep / "patroni-report.txt").write_text(report + "\n")
    shutil.copyfile(tmp_path / "server.log", keep / "patroni-server.log")
    assert rows >= answered, report  # no usage row lost (a failed request may have its row too)
    assert new_holder == holder and new_epoch - epoch <= 1, report  # leadership kept, or moved once
    assert switch[2] <= 5 and fail[2] <= 5, report  # failures, if any, within a few seconds
    assert answered > 100, report
    assert after.startswith("ok: ") and f"replica {other}" in after, after
    assert alone.startswith("warn: ") and "names 2 members but the primary sees 0 standby(s)" in alone, alone


def test_three_etcd_members_elect_a_leader_over_peer_tls(cluster):
    """The three votes of docs/store.md's setup: each etcd member's peer port takes only a certificate of the CA,
    and the three find a majority with them."""
    init_ca(cluster.base / "ca")
    ports = {f"e{i}": (free_port(), free_port()) for i in (1, 2, 3)}
    voters = ",".join(f"{name}=127.0.0.1:{c}:{p}" for name, (c, p) in ports.items())
    done = subprocess.run(
        [sys.executable, "-m", "llmgw", "server", "init", "--patroni", "--members",
         f"pg1=127.0.0.1:{free_port()}:{free_port()},pg2=127.0.0.1:{free_port()}:{free_port()}", "--etcd", voters,
         "--out", str(cluster.out), "--ca", str(cluster.base / "ca"), "--etcd-config-dir", f"{cluster.out}/{{member}}/etcd",
         "--etcd-data-dir", f"{cluster.base}/data/{{member}}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (cluster.base / "data").mkdir()
    if cluster.as_postgres:
        account = pwd.getpwnam("postgres")
        for path in [cluster.base, *cluster.base.rglob("*")]:
            os.chown(path, account.pw_uid, account.pw_gid)
    for name in ports:
        cluster._start(name, ["etcd"], env_file(cluster.out / name / "etcd" / "etcd.env"))
    tls = cluster.out / "e1" / "etcd" / "tls"
    context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    context.load_cert_chain(str(tls / "member.pem"), str(tls / "member-key.pem"))

    def healthy(name: str) -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{ports[name][0]}/health", timeout=3, context=context) as r:
                return json.loads(r.read())["health"] == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    for name in ports:
        wait_for(lambda: healthy(name), 60, f"{name} healthy (a leader elected)", cluster.logs)
    plain = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"https://127.0.0.1:{ports['e2'][1]}/members", timeout=5, context=plain)
