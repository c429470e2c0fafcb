"""A model's update and canary survive the loss of their leader: two `llmgw server` on one PostgreSQL, the
tests' fake agent (a real sim engine per shard, answering as its revision), clients through the gateway that
survives.

`ctl model update chat --to v2` starts on A; the agent holds the new revision's replica at starting, A is
killed with SIGKILL while the job waits for it; B takes the lease, finds the job in the store and carries it
on from its stage: the update ends done, one replica of chat serving v2 and no canary left. Then an update to
v3 on B is killed while chat's own replica restarts on v3 (stage `moving`): A, started again, finishes it.
Then a canary at 10% on A survives A's SIGKILL: B, started again, takes over and splits the sessions as before."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import openai
import pytest

from llmgw.wire import messages as w
from tests.control.test_failover_slow import free_port
from tests.control.test_service import EngineStartingAgent

pytestmark = pytest.mark.slow

LEASE_TTL = 3  # seconds: a standby takes over within about 4 s of the leader's death
CHAT = {"name": "chat", "engine": "sim", "source": "acme/chat@v1", "profiles": [{"name": "cpu"}],
        "scaling": {"min": 1, "max": 1}}
ASK = [{"role": "user", "content": "What is 17 + 25?"}]


def write_server(path: Path, dsn: str) -> dict[str, int]:
    ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}
    path.write_text(json.dumps({  # JSON is YAML
        "listen": f"127.0.0.1:{ports['client']}", "admin_listen": f"127.0.0.1:{ports['admin']}",
        "admin_token_file": str(path.parent / "admin-token"),  # one token for both, as one cluster
        "metrics_listen": f"127.0.0.1:{ports['metrics']}", "agent_listen": f"127.0.0.1:{ports['agent']}",
        "agent_insecure": True, "store": {"dsn": dsn}, "auth": {"keys_required": False},
        # the fake agent sends no heartbeats: a long window, so the test measures the take-over, not a node lost
        "control": {"reconcile_interval": "500ms", "lease_ttl": f"{LEASE_TTL}s", "heartbeat_window": "300s"},
        "models": [],
    }))
    return ports


class HoldingAgent(EngineStartingAgent):
    """One sim engine per shard, stopped when told; a new replica of the model `hold` names stays `starting`
    (its engine runs, its ready not yet said) until `release()`."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.running: dict[str, object] = {}
        self.sources: dict[str, str] = {}
        self.held: set[str] = set()
        self.hold = ""
        self.session = None

    def register(self) -> w.Register:
        reg = super().register()
        shards = tuple(w.RunningShard(shard_id=s.shard_id, model=s.model, engine=s.engine,
                                      state="starting" if s.shard_id in self.held else "ready",
                                      port=self.ports[s.shard_id]) for s in self.shards.values())
        return w.Register(node_id=reg.node_id, engines=reg.engines, inventory=reg.inventory, shards=shards)

    async def on_session(self, session) -> None:
        from llmgw.simengine import SimOptions, start

        self.welcomes.append(session.url)
        self.session = session
        async for message in session:
            if isinstance(message, w.StartShard):
                engine = await start(SimOptions(models=(message.model,), port=0, api_key=message.api_key,
                                                ttft=0.0, tpot=0.0), shutdown_timeout=0.2)
                self.engines.append(engine)
                self.running[message.shard_id] = engine
                self.sources[message.shard_id] = message.weights.source if message.weights else ""
                self.shards[message.shard_id] = message
                self.ports[message.shard_id] = engine.port
                state = "ready"
                if message.model == self.hold:
                    self.held.add(message.shard_id)
                    state = "starting"
                await session.send(w.ShardStatus(shard_id=message.shard_id, state=state, model=message.model,
                                                 port=engine.port, command_id=message.command_id,
                                                 message="loading" if state == "starting" else ""))
            elif isinstance(message, w.StopShard):
                engine = self.running.pop(message.shard_id, None)
                self.shards.pop(message.shard_id, None)
                self.sources.pop(message.shard_id, None)
                self.held.discard(message.shard_id)
                if engine is not None:
                    await engine.close()
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="stopped",
                                                 command_id=message.command_id))

    async def release(self) -> None:
        self.hold = ""
        for shard_id in sorted(self.held):
            start = self.shards[shard_id]
            await self.session.send(w.ShardStatus(shard_id=shard_id, state="ready", model=start.model,
                                                  port=self.ports[shard_id]))
        self.held.clear()

    def serving(self) -> list[tuple[str, str]]:
        """(model, source) of every replica running, sorted."""
        return sorted((self.shards[s].model, self.sources[s]) for s in self.shards)


class Cluster:
    def __init__(self, tmp_path: Path, dsn: str) -> None:
        self.tmp = tmp_path
        self.ports = {name: write_server(tmp_path / f"{name}.yaml", dsn) for name in ("a", "b")}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> subprocess.Popen:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = open(self.tmp / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(self.tmp / f"{name}.yaml")],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def url(self, name: str, kind: str = "client") -> str:
        return f"http://127.0.0.1:{self.ports[name][kind]}"

    def logs(self) -> str:
        return "\n".join(f"--- {n}.log\n" + (self.tmp / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in self.procs)

    async def leader(self, http: aiohttp.ClientSession, name: str) -> dict | None:
        try:
            async with http.get(self.url(name) + "/leader", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                body = await resp.json(content_type=None)
                return body if resp.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {(self.tmp / 'admin-token').read_text().strip()}"}

    async def admin(self, http: aiohttp.ClientSession, name: str, method: str, path: str, body=None) -> dict:
        async with http.request(method, self.url(name, "admin") + "/api/v1" + path, json=body,
                                headers=self.headers()) as resp:
            assert resp.status < 300, (resp.status, await resp.text())
            return await resp.json()

    async def ctl(self, name: str, *argv: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "llmgw", "ctl", *argv, "--admin", self.url(name, "admin"),
            "--token-file", str(self.tmp / "admin-token"), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return proc.returncode, out.decode()


async def until(check, timeout: float, what: str, logs=lambda: "") -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{logs()}")


class Load:
    """Clients asking chat through one gateway, one request after another, every outcome kept."""

    def __init__(self, base_url: str) -> None:
        self.sdk = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=10)
        self.outcomes: list[tuple[float, str, str]] = []  # (when, the model that answered or "", the error)
        self.task: asyncio.Task | None = None

    async def _run(self) -> None:
        n = 0
        while True:
            n += 1
            try:
                reply = await self.sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=3,
                                                               user=f"user-{n % 50}")
                self.outcomes.append((time.monotonic(), reply.model, ""))
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                self.outcomes.append((time.monotonic(), "", f"{type(exc).__name__}: {exc}"[:200]))
                await asyncio.sleep(0.05)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> list[str]:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await self.sdk.close()
        return [o[2] for o in self.outcomes if o[2]]


async def test_an_update_and_a_canary_survive_the_kill_of_their_leader(tmp_path, postgres_server):
    dsn = postgres_server.dsn(postgres_server.create_database())
    cluster = Cluster(tmp_path, dsn)
    agent = HoldingAgent([f"127.0.0.1:{cluster.ports[n]['agent']}" for n in ("a", "b")])
    load = None
    try:
        async with aiohttp.ClientSession() as http:
            cluster.start("a")
            await until(lambda: cluster.leader(http, "a"), 60, "A leading", cluster.logs)
            cluster.start("b")
            agent.start()
            await cluster.admin(http, "a", "POST", "/models", CHAT)
            await until(lambda: asyncio.sleep(0, agent.serving() == [("chat", "acme/chat@v1")]), 30, "chat on v1")

            async def update_killed(leader: str, standby: str, to: str, held: str, waiting: str, stage: str) -> None:
                """`ctl model update chat --to TO` on LEADER, the agent holding HELD's new replica at starting;
                kill -9 LEADER once a step of the job says WAITING; STANDBY carries the job on from STAGE to done."""
                nonlocal load
                await until(answers_through(http, cluster.url(standby)), 60, f"chat answering through {standby}",
                            cluster.logs)
                old = (await cluster.leader(http, leader))["holder"]
                epoch = (await cluster.leader(http, leader))["epoch"]
                before = (await cluster.admin(http, leader, "GET", "/models/chat"))["spec"]["source"]
                agent.hold = held
                load = Load(cluster.url(standby))
                load.start()
                code, out = await cluster.ctl(leader, "model", "update", "chat", "--to", to)
                assert code == 0, out
                job_id = out.split("job ", 1)[1].split(":", 1)[0]

                async def holding() -> bool:
                    job = await cluster.admin(http, leader, "GET", f"/jobs/{job_id}")
                    return bool(agent.held) and any(waiting in step["text"] for step in job["steps"])

                await until(holding, 30, f"the update at {waiting!r}", cluster.logs)
                running = agent.serving()
                cluster.kill(leader)
                killed_at = time.monotonic()
                took = await until(lambda: cluster.leader(http, standby), 30, f"{standby} taking over", cluster.logs)
                new = (await cluster.leader(http, standby))["holder"]

                async def job_on_standby() -> dict | None:
                    async with http.get(cluster.url(standby, "admin") + f"/api/v1/jobs/{job_id}",
                                        headers=cluster.headers()) as resp:
                        # 404: leading, and not yet through what the former leader left
                        return None if resp.status == 404 else await resp.json()

                async def resumed() -> bool:
                    job = await job_on_standby()
                    return job is not None and any(s["text"].startswith("resumed by ") for s in job["steps"])

                await until(resumed, 30, f"{standby} carrying the update on", cluster.logs)
                await asyncio.sleep(2)  # the held replica adopted, still starting: the job waits for it
                assert agent.serving() == running  # nothing started twice, nothing stopped
                assert (await job_on_standby())["state"] == "running"
                await agent.release()

                async def ended() -> bool:
                    return (await job_on_standby())["state"] in ("done", "failed")

                await until(ended, 60, f"the update ending on {standby}", cluster.logs)
                job = await job_on_standby()
                words = f"resumed by {new} after {old} (epoch {epoch}) lost the lease"
                assert job["state"] == "done", (job, cluster.logs())
                assert job["now"].startswith(f"done: chat runs acme/chat@{to}; `llmgw ctl model rollback chat` "
                                             f"returns it to {before} until "), job["now"]
                assert job["now"].endswith(f"({words})"), job["now"]
                texts = [s["text"] for s in job["steps"]]
                assert texts[0].endswith(f" asked to update chat from {before} to acme/chat@{to}"), texts
                assert f"{words}, from its stage '{stage}'" in texts, texts
                await until(lambda: asyncio.sleep(0, agent.serving() == [("chat", f"acme/chat@{to}")]), 30,
                            "one replica set serving: chat on the new revision, the canary gone")
                await asyncio.sleep(2)
                assert agent.serving() == [("chat", f"acme/chat@{to}")]
                spec = (await cluster.admin(http, standby, "GET", "/models/chat"))["spec"]
                assert spec["source"] == f"acme/chat@{to}"
                assert (await cluster.admin(http, standby, "GET", "/canaries"))["canaries"] == []
                code, out = await cluster.ctl(standby, "jobs", job_id, "--no-follow")
                assert code == 0 and f"{words}, from its stage '{stage}'" in out, out
                code, out = await cluster.ctl(standby, "jobs", "--model", "chat")
                assert code == 0 and words in out, out
                await load.stop()
                sent = [o for o in load.outcomes if o[0] >= killed_at]
                failed = [o for o in sent if o[2]]
                print(f"\nupdate to {to}, {leader} killed at {stage!r}: {standby} took the lease {took:.1f} s later; "
                      f"of {len(sent)} requests sent to {standby} from the kill on, {len(failed)} failed "
                      f"({sum(1 for o in load.outcomes if o[2])} of {len(load.outcomes)} in all): "
                      f"{[f[2] for f in failed][:3]}")
                assert len(sent) > 20 and len(failed) <= 3, failed[:5]
                assert sum(1 for o in load.outcomes if o[2]) <= 3, [o[2] for o in load.outcomes if o[2]][:5]
                load = None

            async def standby_up(name: str) -> None:
                async def check() -> bool:
                    try:
                        async with http.get(cluster.url(name) + "/leader") as resp:
                            return resp.status == 503
                    except aiohttp.ClientError:
                        return False

                cluster.start(name)
                await until(check, 60, f"{name} up again as a standby", cluster.logs)

            # killed while the new revision starts beside the old: B carries it on
            await update_killed("a", "b", "v2", "chat-canary", "chat-canary started beside chat", "starting")
            # killed while the model's own replica restarts on the new revision (the canary serving every
            # session meanwhile): A, started again, carries it on
            await standby_up("a")
            await update_killed("b", "a", "v3", "chat", "restarting its 1 replica on it", "moving")

            # a canary at 10% on A, then A killed: B, started again, takes over and keeps the split
            await standby_up("b")
            code, out = await cluster.ctl("a", "model", "canary", "chat", "--to", "v4", "--weight", "10%", "--wait")
            assert code == 0, out
            [canary] = (await cluster.admin(http, "a", "GET", "/canaries"))["canaries"]
            assert (canary["weight"], canary["serving"]) == (10.0, True)
            cluster.kill("a")
            await until(lambda: cluster.leader(http, "b"), 30, "B taking over from A", cluster.logs)
            [canary] = (await cluster.admin(http, "b", "GET", "/canaries"))["canaries"]
            assert (canary["name"], canary["revision"], canary["weight"], canary["serving"]) == \
                ("chat-canary", "acme/chat@v4", 10.0, True)
            both = [("chat", "acme/chat@v3"), ("chat-canary", "acme/chat@v4")]
            await until(lambda: asyncio.sleep(0, agent.serving() == both), 30, "both sides still running once each")
            await until(answers_through(http, cluster.url("b")), 30, "chat answering through B")
            sdk = openai.AsyncOpenAI(base_url=cluster.url("b") + "/v1", api_key="none", max_retries=2, timeout=10)
            sides: dict[str, str] = {}
            gate = asyncio.Semaphore(8)

            async def session(n: int) -> None:
                async with gate:
                    reply = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1,
                                                              user=f"user-{n}")
                    sides[f"user-{n}"] = reply.model

            await asyncio.gather(*(session(n) for n in range(1000)))
            await sdk.close()
            share = sum(1 for m in sides.values() if m == "chat-canary") / len(sides)
            print(f"canary after the take-over: {share:.1%} of 1,000 sessions")
            assert 0.07 <= share <= 0.13, share
            assert agent.serving() == both
    finally:
        if load is not None:
            await load.stop()
        await agent.stop()
        cluster.stop()


def answers_through(http: aiohttp.ClientSession, base: str):
    """A check: chat answers through the gateway at `base`."""

    async def check() -> bool:
        try:
            async with http.post(base + "/v1/chat/completions",
                                 json={"model": "chat", "messages": ASK, "max_tokens": 2}) as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False
    return check
