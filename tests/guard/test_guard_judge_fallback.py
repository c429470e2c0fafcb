"""Judges asked in turn within their budget, then fail open or closed; the cache; long texts.

The judges here are fake servers speaking OpenAI's chat API in Qwen3Guard's
words: "Safety: Unsafe" when the text mentions a bomb. One can be slow,
broken (500) or answer in words no format reads.
"""

from __future__ import annotations

import asyncio

import attrs
import openai
import pytest
from aiohttp import web

from llmgw.auth.principal import ANONYMOUS
from llmgw.guard.gateway import GuardLayer
from llmgw.guard.judge import MAX_JUDGED_CHARS, HTTPTransport, Judge, JudgeModel, clip
from llmgw.guard.policy import JudgeRules, PolicyBook, parse_policies
from llmgw.guard.scan import Scanner
from llmgw.plugins.manager import load_plugins
from llmgw.router.errors import GatewayError


@attrs.define
class FakeJudge:
    mode: str = "ok"  # ok, slow, broken, garbage
    bodies: list = attrs.Factory(list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if self.mode == "slow":
            await asyncio.sleep(2)
        if self.mode == "broken":
            return web.json_response({"error": {"message": "down"}}, status=500)
        text = " ".join(m.get("content") or "" for m in body.get("messages", [])) + body.get("prompt", "")
        said = "Safety: Unsafe\nCategories: Violent" if "bomb" in text else "Safety: Safe\nCategories: None"
        if self.mode == "garbage":
            said = "I would rather not say."
        return web.json_response({"id": "j", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": said}}]})


@pytest.fixture
async def judges():
    """`await judges(mode)`: a fake judge server; its `url` is an OpenAI base URL."""
    runners = []

    async def make(mode: str = "ok") -> FakeJudge:
        judge = FakeJudge(mode)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", judge.handle)
        app.router.add_post("/v1/completions", judge.handle)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        judge.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        return judge

    yield make
    for runner in runners:
        await runner.cleanup()


@pytest.fixture(scope="module")
def plugins():
    return load_plugins()


def client(plugins, servers: dict[str, FakeJudge], **kw) -> tuple[Judge, HTTPTransport]:
    transport = HTTPTransport({name: s.url for name, s in servers.items()})
    models = {name: JudgeModel(name, "qwen3guard") for name in (*servers, "missing")}
    return Judge(models, plugins.judge_formats(), transport, **kw), transport


BOMB = [{"role": "user", "content": "how do I build a bomb"}]


async def test_the_next_judge_is_asked_when_one_is_slow_broken_or_unreadable(judges, plugins):
    slow, broken, garbage, good = await judges("slow"), await judges("broken"), await judges("garbage"), await judges()
    judge, transport = client(plugins, {"slow": slow, "broken": broken, "garbage": garbage, "good": good})
    try:
        rules = JudgeRules(models=("missing", "slow", "broken", "garbage", "good"), input="block", latency_budget=0.3)
        answer = await judge.ask(rules, BOMB, "user")
        assert answer.model == "good" and not answer.verdict.safe
        assert answer.errors == (("missing", "unavailable"), ("slow", "timeout"), ("broken", "unavailable"),
                                 ("garbage", "format"))
        assert answer.counts(rules) == (True, "Violent")
        assert answer.seconds < 1.5
    finally:
        await transport.close()


async def test_the_same_text_is_not_asked_twice_within_the_cache_time(judges, plugins):
    good = await judges()
    now = [0.0]
    judge, transport = client(plugins, {"good": good}, clock=lambda: now[0])
    rules = JudgeRules(models=("good",), input="block", latency_budget=5)
    try:
        first = await judge.ask(rules, BOMB, "user")
        again = await judge.ask(rules, BOMB, "user")
        assert again.cached and again.verdict == first.verdict and len(good.bodies) == 1
        await judge.ask(rules, [{"role": "user", "content": "something else"}], "user")
        assert len(good.bodies) == 2
        now[0] += 301
        await judge.ask(rules, BOMB, "user")
        assert len(good.bodies) == 3
    finally:
        await transport.close()


async def test_a_long_text_is_read_by_its_start_and_end(judges, plugins):
    good = await judges()
    judge, transport = client(plugins, {"good": good})
    text = "bomb " + "filler " * 5000 + "the very end"
    try:
        await judge.ask(JudgeRules(models=("good",), input="flag", latency_budget=5),
                        [{"role": "user", "content": text}], "user")
    finally:
        await transport.close()
    sent = good.bodies[0]["messages"][0]["content"]
    assert len(sent) <= MAX_JUDGED_CHARS and sent.startswith("bomb ") and sent.endswith("the very end")
    assert clip("short") == "short"


async def test_unsafe_counts_only_for_the_policys_categories_and_controversial_as_it_says(judges, plugins):
    good = await judges()
    judge, transport = client(plugins, {"good": good})
    try:
        answer = await judge.ask(JudgeRules(models=("good",), input="block", latency_budget=5), BOMB, "user")
    finally:
        await transport.close()
    assert answer.counts(JudgeRules(models=("good",), categories=frozenset({"jailbreak"}))) == (False, "")
    assert answer.counts(JudgeRules(models=("good",), categories=frozenset({"violent"}))) == (True, "Violent")
    controversial = attrs.evolve(answer, verdict=plugins.judge_formats()["qwen3guard"].parse(
        "Safety: Controversial\nCategories: Violent"))
    assert controversial.counts(JudgeRules(models=("good",))) == (False, "")
    assert controversial.counts(JudgeRules(models=("good",), controversial="unsafe")) == (True, "Violent")


def guard_layer(plugins, judge: Judge, fail: str, metrics=None) -> GuardLayer:
    from llmgw.guard.metrics import GuardMetrics

    policy = {"j": {"fail": fail, "judge": {"models": list(judge.models)[:1], "input": "block", "output": "block",
                                            "latency_budget": "200ms"}}}
    return GuardLayer(PolicyBook(parse_policies(policy), ["j"]), Scanner(plugins.detectors()), judge=judge,
                      metrics=metrics or GuardMetrics())


async def test_no_judge_answering_fails_open_flagged_or_closed_refused(judges, plugins):
    from llmgw.guard.metrics import GuardMetrics

    broken = await judges("broken")
    metrics = GuardMetrics()
    judge, transport = client(plugins, {"broken": broken}, metrics=metrics)
    body = {"messages": BOMB}
    try:
        layer = guard_layer(plugins, judge, "open", metrics)
        g = layer.begin(ANONYMOUS, "m", "chat")
        assert await g.check_input(body) == body
        assert (g.record.action, g.record.category) == ("flagged", "judge: unavailable")
        assert layer.metrics.registry.get_sample_value("llmgw_guard_fail_open_total") == 1
        assert layer.metrics.registry.get_sample_value("llmgw_guard_judge_errors_total",
                                                       {"reason": "unavailable"}) == 1
        g = guard_layer(plugins, judge, "closed").begin(ANONYMOUS, "m", "chat")
        with pytest.raises(GatewayError) as refused:
            await g.check_input(body)
        assert (refused.value.status, refused.value.code) == (503, "guard_unavailable")
    finally:
        await transport.close()


async def test_an_unsafe_verdict_blocks_input_and_stops_an_answer(judges, plugins):
    good = await judges()
    judge, transport = client(plugins, {"good": good})
    try:
        g = guard_layer(plugins, judge, "open").begin(ANONYMOUS, "m", "chat")
        with pytest.raises(GatewayError) as refused:
            await g.check_input({"messages": BOMB})
        assert "(judge: Violent)" in refused.value.message
        g = guard_layer(plugins, judge, "open").begin(ANONYMOUS, "m", "chat")
        await g.check_input({"messages": [{"role": "user", "content": "tell me a story"}]})
        answer = (b'{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",'
                  b'"content":"Once there was a bomb."}}]}')
        assert b'"finish_reason":"content_filter"' in await g.filter_answer(answer)
        assert good.bodies[-1]["messages"][-1] == {"role": "assistant", "content": "Once there was a bomb."}
    finally:
        await transport.close()


# ---------------------------------------------------------------- through the gateway


async def test_a_judge_in_the_catalog_is_hidden_refused_and_asked_by_the_gateway(judges, sim, guarded, served):
    good = await judges()
    engine = await sim(models=("echo",))
    policy = {"default": ["safety"], "policies": {"safety": {
        "judge": {"models": ["guard-1"], "input": "block", "output": "block", "latency_budget": "2s"}}}}
    models = [served("echo", engine),
              {"name": "guard-1", "role": "guard", "guard": {"format": "qwen3guard"}, "endpoints": [{"url": good.url}]}]
    gw = await guarded(models, guard=policy)
    c = gw.client()
    assert [m.id for m in (await c.models.list()).data] == ["echo"]
    with pytest.raises(openai.NotFoundError) as hidden:
        await c.chat.completions.create(model="guard-1", messages=BOMB)
    assert hidden.value.body["message"].endswith("your key may use: echo")  # the judge is not offered
    with pytest.raises(openai.BadRequestError) as refused:
        await c.chat.completions.create(model="echo", messages=BOMB)
    assert refused.value.body["code"] == "content_policy_violation" and "judge: Violent" in refused.value.body["message"]
    fine = await c.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hello there"}])
    assert fine.choices[0].message.content == "hello there"
    assert gw.metric("llmgw_guard_judge_latency_seconds_count", judge_model="guard-1") >= 1
    asked = len(good.bodies)
    await c.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hello there"}])
    assert len(good.bodies) == asked  # both verdicts came from the cache


async def test_a_judge_reads_a_streamed_answer_and_stops_it(judges, sim, guarded, served):
    good = await judges()
    engine = await sim(models=("echo",))
    judge = {"models": ["guard-1"], "output": "block", "latency_budget": "2s"}
    policies = {"sentence": {"judge": judge}, "held": {"judge": judge, "stream": "buffer_all"}}
    models = [served("echo", engine),
              {"name": "guard-1", "role": "guard", "guard": {"format": "qwen3guard"}, "endpoints": [{"url": good.url}]}]
    gw = await guarded(models, guard={"default": ["sentence"], "policies": policies})
    said = "Once upon a time. There was a bomb in the story, and it ended"

    async def stream(client) -> tuple[str, list]:
        text, finishes = "", []
        async for chunk in await client.chat.completions.create(model="echo", messages=[
                {"role": "user", "content": said}], stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finishes += [choice.finish_reason] if choice.finish_reason else []
        return text, finishes

    text, finishes = await stream(gw.client())
    assert finishes == ["content_filter"] and text.startswith("Once upon a time.")  # released before the reading
    gw2 = await guarded(models, guard={"default": ["held"], "policies": policies})
    text, finishes = await stream(gw2.client())
    assert finishes == ["content_filter"] and text == ""


async def test_a_key_kept_in_the_cluster_is_judged_only_by_judges_the_cluster_runs(judges, sim, guarded):
    """Residency reaches the guardrails: a key whose requests must stay in the cluster never has its text sent
    to a judge at an external provider; a judge the cluster's scheduler runs is asked instead, and with none
    the policy's `fail` decides, as for any judge that cannot answer."""
    from llmgw.auth.principal import Principal
    from llmgw.router.replicas import Replica

    outside, inside = await judges(), await judges()
    engine = await sim(models=("echo",))
    keys = {name: Principal(key_id=f"key-{name}", key_prefix=f"llmgw-{name}00", key_name=name, kind="service",
                            org_id="org-1", team_id=None, project_id="prj-1", user_id=None, band=None,
                            allowed_models=None, in_cluster="key" if name == "kept" else "")
            for name in ("kept", "free")}
    policy = {"default": ["safety"], "policies": {"safety": {"fail": "closed", "judge": {
        "models": ["guard-out", "guard-in"], "input": "block", "latency_budget": "2s"}}}}
    models = [{"name": "echo", "profiles": [{"engine": "sim"}]},
              {"name": "guard-out", "role": "guard", "guard": {"format": "qwen3guard"},
               "endpoints": [{"url": outside.url}]},
              {"name": "guard-in", "role": "guard", "guard": {"format": "qwen3guard"},
               "profiles": [{"engine": "sim"}]}]
    gw = await guarded(models, guard=policy, keys={f"sk-{k}": p for k, p in keys.items()})
    gw.gateway.replicas.add(Replica(id="echo/n1", model="echo", base_url=engine.url + "/v1", source="control"))
    kept = gw.client("sk-kept")

    # Only the outside judge runs: the kept key's text goes nowhere, and fail: closed blocks it.
    with pytest.raises(openai.APIStatusError) as blocked:
        await kept.chat.completions.create(model="echo", messages=[{"role": "user", "content": "kept words"}])
    assert blocked.value.status_code in (400, 503)
    assert outside.bodies == []

    # The cluster runs a judge too: it is asked, the outside one still is not.
    gw.gateway.replicas.add(Replica(id="guard-in/n1", model="guard-in", base_url=inside.url, source="control"))
    fine = await kept.chat.completions.create(model="echo", messages=[{"role": "user", "content": "kept words"}])
    assert fine.choices[0].message.content == "kept words"
    assert [b["messages"][-1]["content"] for b in inside.bodies][-1].endswith("kept words")
    assert outside.bodies == []

    # A key free to leave the cluster is judged by the first judge, outside.
    free = gw.client("sk-free")
    await free.chat.completions.create(model="echo", messages=[{"role": "user", "content": "free words"}])
    assert any("free words" in str(b) for b in outside.bodies)
