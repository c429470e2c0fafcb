"""A model's revisions on a real control plane: update with a quality gate, rollback, canary, promote, abort.

A control plane in the gateway, and a fake agent that starts a real sim engine for each StartShard, answering
as the revision the StartShard's source names: `acme/chat@good` and `@better` know the answer to the suite's
question (sim --answer-prefix 42), `@bad` does not. The operator's side is the admin API over HTTP and the
client's the openai SDK through the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import io

import aiohttp
import attrs
import openai
import pytest
import yaml

from llmgw.config.units import Duration
from llmgw.router.gateway import GATEWAY
from llmgw.wire import messages as w

from .conftest import ENGINES
from .test_runtime_catalog import Admin, config_for
from .test_service import EngineStartingAgent, until

PREFIXES = {"acme/chat@good": "42", "acme/chat@better": "42", "acme/chat@bad": ""}
CHAT = {"name": "chat", "engine": "sim", "source": "acme/chat@good", "profiles": [{"name": "cpu"}],
        "scaling": {"min": 1, "max": 1}}
SUITE = {"name": "sums", "threshold": 0.8, "max_tokens": 8,
         "cases": [{"id": "add", "prompt": "What is 17 + 25?", "contains": "42"},
                   {"id": "again", "prompt": "And 40 + 2?", "contains": "42"}]}
ASK = [{"role": "user", "content": "What is 17 + 25?"}]


class RevisionAgent(EngineStartingAgent):
    """Starts a sim engine per shard that answers as its revision does; stops it when told."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.running: dict[str, object] = {}
        self.sources: dict[str, str] = {}

    async def on_session(self, session) -> None:
        from llmgw.simengine import SimOptions, start

        self.welcomes.append(session.url)
        async for message in session:
            if isinstance(message, w.StartShard):
                source = message.weights.source if message.weights else ""
                engine = await start(SimOptions(models=(message.model,), port=0, api_key=message.api_key,
                                                ttft=0.0, tpot=0.0, answer_prefix=PREFIXES.get(source, "")),
                                     shutdown_timeout=0.2)
                self.engines.append(engine)
                self.running[message.shard_id] = engine
                self.sources[message.shard_id] = source
                self.shards[message.shard_id] = message
                self.ports[message.shard_id] = engine.port
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="ready", model=message.model,
                                                 port=engine.port, command_id=message.command_id))
            elif isinstance(message, w.StopShard):
                engine = self.running.pop(message.shard_id, None)
                self.shards.pop(message.shard_id, None)
                self.sources.pop(message.shard_id, None)
                if engine is not None:
                    await engine.close()
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="stopped",
                                                 command_id=message.command_id))

    def revisions(self, model: str) -> list[str]:
        return sorted(self.sources[s] for s, m in self.shards.items() if m.model == model)


async def _cluster(tmp_path, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app

    config = config_for(tmp_path, str(tmp_path / "store.db"))
    # The fake agent sends no heartbeats, and 2,000 requests take longer than the 15 s a silent node is kept:
    # a longer window, so the test measures the split rather than a node lost and found
    config = attrs.evolve(config, control=attrs.evolve(config.control, heartbeat_window=Duration(seconds=300)))
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1")
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    slot.plane.reconciler.hold_starts_until = 0.0
    agent = RevisionAgent([f"127.0.0.1:{slot.plane.agent_port}"])
    agent.start()
    await until(lambda: slot.plane.nodes(), what="the agent registered")
    return config, app, slot, client, agent


async def _ctl(config, tmp_path, *argv: str) -> tuple[int, str]:
    """`llmgw ctl ARGV` against the cluster's admin API, in a thread (it blocks while the loop serves it)."""
    from llmgw.cli.main import main

    def run() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["ctl", *argv, "--admin", f"http://{config.admin_listen}",
                         "--token-file", str(tmp_path / "admin-token")])
        return code, out.getvalue()

    return await asyncio.to_thread(run)


async def _job(admin: Admin, job_id: str, timeout: float = 20.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        job = await admin.call("GET", f"/jobs/{job_id}")
        if job["state"] in ("done", "failed"):
            return job
        assert asyncio.get_running_loop().time() < deadline, f"job {job_id} still {job['state']}: {job['now']}"
        await asyncio.sleep(0.1)


async def _answer(sdk, **extra) -> str:
    reply = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=6, **extra)
    return reply.choices[0].message.content


@pytest.mark.slow
async def test_an_update_stopped_by_its_gate_keeps_the_old_revision_and_one_that_passes_moves(tmp_path,
                                                                                              aiohttp_client):
    config, app, slot, client, agent = await _cluster(tmp_path, aiohttp_client)
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="none", max_retries=0)
    try:
        async with aiohttp.ClientSession() as http:
            admin = Admin(http, config, tmp_path)
            await admin.call("POST", "/models", CHAT)
            await until(lambda: agent.revisions("chat") == ["acme/chat@good"], what="chat ready")
            await until(lambda: app[GATEWAY].replicas.replicas_for("chat"), what="chat in the router")
            assert (await _answer(sdk)).startswith("42")

            # the operator's suite, asked by hand: exit 0 when it reaches its threshold, 1 when not
            suite_file = tmp_path / "sums.yaml"
            suite_file.write_text(yaml.safe_dump(SUITE))
            strict_file = tmp_path / "strict.yaml"
            strict = {**SUITE, "cases": [{"prompt": "What is 9 * 11?", "contains": "99"}]}
            strict_file.write_text(yaml.safe_dump(strict))
            code, out = await _ctl(config, tmp_path, "eval", "run", "chat", str(suite_file))
            assert code == 0 and "chat scored 1.00 on sums (2 of 2 cases passed; the threshold is 0.80)" in out
            code, out = await _ctl(config, tmp_path, "eval", "run", "chat", str(strict_file))
            assert code == 1 and "FAIL  case-1: the answer does not contain '99'" in out

            # a suite with a mistake is refused before anything starts, naming the field
            async with http.post(admin.base + "/models/chat/update", headers=admin.headers,
                                 json={"to": "bad", "gate": {**SUITE, "threshold": 3}}) as resp:
                assert resp.status == 400
                assert "threshold: give a number from 0 to 1" in (await resp.json())["error"]
            assert (await admin.call("GET", "/canaries"))["canaries"] == []

            # a revision that fails the suite: stopped in words, the canary gone, the old one serving
            code, out = await _ctl(config, tmp_path, "model", "update", "chat", "--to", "bad", "--gate",
                                   str(suite_file), "--wait")
            assert code == 1, out
            assert "asking chat-canary the quality suite sums (2 cases)" in out
            [job] = [j for j in (await admin.call("GET", "/jobs", model="chat"))["jobs"] if j["kind"] == "update"]
            assert job["state"] == "failed", job
            assert ("stopped by the quality gate: chat-canary scored 0.00 on sums, below its threshold of 0.80 "
                    "(0 of 2 cases passed); chat keeps serving acme/chat@good") in job["now"]
            await until(lambda: "chat-canary" not in agent.revisions("chat-canary") and not
                        agent.revisions("chat-canary"), what="the failed canary stopped")
            assert agent.revisions("chat") == ["acme/chat@good"]
            assert (await admin.call("GET", "/models/chat"))["spec"]["source"] == "acme/chat@good"
            assert (await _answer(sdk)).startswith("42")
            assert (await admin.call("GET", "/canaries"))["canaries"] == []

            # one that passes: the model moves, its replica runs the new source, and the old one is kept
            job = await _job(admin, (await admin.call("POST", "/models/chat/update",
                                                      {"to": "acme/chat@better", "gate": SUITE}))["id"])
            assert job["state"] == "done", job
            texts = [s["text"] for s in job["steps"]]
            assert any("chat-canary passed the quality gate sums" in t for t in texts), texts
            assert job["now"].startswith("done: chat runs acme/chat@better; `llmgw ctl model rollback chat` "
                                         "returns it to acme/chat@good until ")
            await until(lambda: agent.revisions("chat") == ["acme/chat@better"] and
                        not agent.revisions("chat-canary"), what="chat on the new revision, the canary gone")
            assert (await admin.call("GET", "/models/chat"))["spec"]["source"] == "acme/chat@better"
            assert (await _answer(sdk)).startswith("42")

            # rollback: back to the definition the update replaced
            job = await _job(admin, (await admin.call("POST", "/models/chat/rollback", {}))["id"])
            assert job["state"] == "done" and job["now"] == "done: chat runs acme/chat@good again", job
            await until(lambda: agent.revisions("chat") == ["acme/chat@good"], what="chat rolled back")
            async with http.post(admin.base + "/models/chat/rollback", json={}, headers=admin.headers) as resp:
                assert resp.status == 409
                assert "chat has no revision to go back to" in (await resp.json())["error"]
    finally:
        await sdk.close()
        await agent.stop()


@pytest.mark.slow
async def test_a_canary_takes_its_share_of_sessions_sticky_and_is_promoted_or_taken_out(tmp_path, aiohttp_client):
    config, app, slot, client, agent = await _cluster(tmp_path, aiohttp_client)
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="none", max_retries=0)
    try:
        async with aiohttp.ClientSession() as http:
            admin = Admin(http, config, tmp_path)
            await admin.call("POST", "/models", CHAT)
            await until(lambda: app[GATEWAY].replicas.replicas_for("chat"), what="chat in the router")

            # a model declared in server.yaml is moved by changing the file
            async with http.post(admin.base + "/models/primary/update", headers=admin.headers,
                                 json={"to": "acme/primary@v2"}) as resp:
                assert resp.status == 409
                assert "primary is declared in server.yaml" in (await resp.json())["error"]

            # a canary whose gate fails is taken out before it takes any session
            job = await _job(admin, (await admin.call("POST", "/models/chat/canary",
                                                      {"to": "bad", "weight": "10%", "gate": SUITE}))["id"])
            assert job["state"] == "failed" and "the canary was taken out and chat keeps every session" in job["now"]
            assert (await admin.call("GET", "/canaries"))["canaries"] == []

            job = await _job(admin, (await admin.call("POST", "/models/chat/canary",
                                                      {"to": "better", "weight": "10%", "gate": SUITE}))["id"])
            assert job["state"] == "done", job
            [canary] = (await admin.call("GET", "/canaries"))["canaries"]
            assert (canary["name"], canary["revision"], canary["weight"], canary["serving"], canary["ready"]) == \
                ("chat-canary", "acme/chat@better", 10.0, True, 1)
            await until(lambda: app[GATEWAY].canary.split.get("chat") == ("chat-canary", 10.0),
                        what="the router's split")

            # 2,000 sessions through the real router: 10% ± 3% to the canary, each session always one side
            sides: dict[str, str] = {}
            gate = asyncio.Semaphore(8)

            async def session(n: int) -> None:
                async with gate:
                    reply = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1,
                                                              user=f"user-{n}")
                    sides[f"user-{n}"] = reply.model

            await asyncio.gather(*(session(n) for n in range(2000)))
            share = sum(1 for m in sides.values() if m == "chat-canary") / len(sides)
            assert 0.07 <= share <= 0.13, share
            for n in range(0, 2000, 50):  # asked again, each lands where it did
                again = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1, user=f"user-{n}")
                assert again.model == sides[f"user-{n}"]
            # x-llmgw-variant forces a side
            stable_user = next(u for u, m in sides.items() if m == "chat")
            forced = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1, user=stable_user,
                                                       extra_headers={"x-llmgw-variant": "canary"})
            assert forced.model == "chat-canary"
            canary_user = next(u for u, m in sides.items() if m == "chat-canary")
            forced = await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1, user=canary_user,
                                                       extra_headers={"x-llmgw-variant": "stable"})
            assert forced.model == "chat"

            code, out = await _ctl(config, tmp_path, "model", "canary", "chat", "--weight", "50%")
            assert (code, out) == (0, "chat-canary: now takes 50% of chat's sessions\n")
            code, out = await _ctl(config, tmp_path, "model", "canaries")
            assert code == 0 and out.splitlines()[1].split() == ["chat", "chat-canary", "acme/chat@better", "50%",
                                                                 "1/1", "unknown"], out

            # a promotion whose gate fails leaves both as they were
            strict = {**SUITE, "cases": [{"prompt": "What is 9 * 11?", "contains": "99"}]}
            job = await _job(admin, (await admin.call("POST", "/models/chat/canary/promote", {"gate": strict}))["id"])
            assert job["state"] == "failed" and "the canary stays at 50% and chat keeps acme/chat@good" in job["now"]
            assert [c["weight"] for c in (await admin.call("GET", "/canaries"))["canaries"]] == [50.0]
            assert agent.revisions("chat") == ["acme/chat@good"]

            job = await _job(admin, (await admin.call("POST", "/models/chat/canary/promote", {"gate": SUITE}))["id"])
            assert job["state"] == "done", job
            await until(lambda: agent.revisions("chat") == ["acme/chat@better"] and
                        not agent.revisions("chat-canary"), what="chat promoted, its canary gone")
            assert (await admin.call("GET", "/canaries"))["canaries"] == []
            await until(lambda: "chat" not in app[GATEWAY].canary.split, what="the split gone")

            # a canary taken out: its replica stops and the model takes every session again
            await _job(admin, (await admin.call("POST", "/models/chat/canary", {"to": "good", "weight": 100}))["id"])
            assert (await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1)).model == "chat-canary"
            code, out = await _ctl(config, tmp_path, "model", "abort", "chat")
            assert (code, out) == (0, "chat-canary: taken out; chat takes every session again\n")
            await until(lambda: not agent.revisions("chat-canary"), what="the canary stopped")
            assert (await sdk.chat.completions.create(model="chat", messages=ASK, max_tokens=1)).model == "chat"
    finally:
        await sdk.close()
        await agent.stop()
