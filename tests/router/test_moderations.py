"""`/v1/moderations` through the official openai SDK, answered by judge models (`role: guard`) behind the gateway.

The judges are small fake engines this test runs (no guard model runs
here): they answer as a JSON judge or as Llama Guard 3 would, unsafe when
the text speaks of punching someone.
"""

from __future__ import annotations

import json

import openai
import pytest
from aiohttp import web

from .conftest import model, principal


def _asked_text(body: dict) -> str:
    if "prompt" in body:
        return body["prompt"]
    return "\n".join(m["content"] for m in body["messages"] if m["role"] != "system")


@pytest.fixture
async def judge_engine():
    running = []

    async def make(style: str):
        seen: list[dict] = []

        async def answer(request: web.Request) -> web.Response:
            body = await request.json()
            seen.append(body)
            # the asked text is read from its <conversation> or after the categories (Llama Guard)
            asked = _asked_text(body).rsplit("BEGIN CONVERSATION", 1)[-1].rsplit("<conversation>", 1)[-1]
            unsafe = "punch" in asked.lower()
            if style == "garbled":
                text = "I cannot say."
            elif style == "json":
                text = json.dumps({"safe": False, "categories": ["Violence", "Harassment"]} if unsafe
                                  else {"safe": True})
            else:
                text = "unsafe\nS1,S10" if unsafe else "safe"
            usage = {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
            if "prompt" in body:
                return web.json_response({"object": "text_completion", "choices": [{"index": 0, "text": text}],
                                          "usage": usage})
            return web.json_response({"object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        app.router.add_post("/v1/completions", answer)
        app.router.add_get("/v1/models", lambda r: web.json_response({"object": "list", "data": []}))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        running.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen

    yield make
    for runner in running:
        await runner.cleanup()


def judge(name: str, url: str, fmt: str) -> dict:
    return {**model(name, url), "role": "guard", "guard": {"format": fmt}}


async def test_moderations_create_maps_a_json_judges_verdict(sim, gateway, judge_engine):
    url, seen = await judge_engine("json")
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine), judge("guard-j", url, "json")], keys={"sk-a": principal("key-a")})
    raw = await gw.client("sk-a").moderations.with_raw_response.create(
        model="omni-moderation-latest", input=["I will punch you tomorrow.", "Rivers run to the sea."])
    answer = raw.parse()
    assert answer.model == "guard-j" and answer.id.startswith("modr-")
    bad, good = answer.results
    assert bad.flagged and bad.categories.violence and bad.categories.harassment and not bad.categories.sexual
    assert bad.category_scores.violence == 1.0 and bad.category_scores.hate == 0.0
    assert bad.category_applied_input_types.violence == ["text"] == bad.category_applied_input_types.sexual
    assert bad.model_extra["llmgw_categories"] == ["Violence", "Harassment"]
    assert not good.flagged and not any(good.categories.model_dump().values())
    assert len(seen) == 2, "one question to the judge a text"
    (row,) = await gw.settle(1)
    assert row.request_id == raw.headers["x-llmgw-request-id"]
    assert (row.model_requested, row.model_served, row.status, row.outcome) == \
        ("omni-moderation-latest", "guard-j", 200, "ok")
    assert (row.prompt_tokens, row.completion_tokens, row.key_id) == (80, 10, "key-a")
    assert 'llmgw_requests_total{model="guard-j",outcome="ok"} 1.0' in gw.metrics.exposition().decode()


async def test_a_llama_guard_judge_is_asked_in_its_own_format(gateway, judge_engine):
    url, _ = await judge_engine("llamaguard3")
    gw = await gateway([judge("lg", url, "llamaguard3")])
    answer = await gw.client().moderations.create(model="lg", input="Go punch your neighbour.")
    (result,) = answer.results
    assert result.flagged and result.categories.violence and result.categories.hate
    assert result.model_extra["llmgw_categories"] == ["Violent Crimes", "Hate"]
    parts = await gw.client().moderations.create(model="lg", input=[{"type": "text", "text": "A calm river."}])
    assert len(parts.results) == 1 and not parts.results[0].flagged
    off = await gateway([judge("lg", url, "llamaguard3")], guard={"mode": "off"})
    assert off.gateway.guard is None
    answer = await off.client().moderations.create(input="Go punch your neighbour.")
    assert answer.results[0].flagged, "the judge formats are the plugins' even with the guardrails off"


async def test_no_judge_is_a_clear_400_and_an_unknown_judge_a_404(sim, gateway, judge_engine):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    with pytest.raises(openai.BadRequestError) as refused:
        await gw.client().moderations.create(input="hello")
    assert refused.value.body["code"] == "no_judge_model" and "role: guard" in refused.value.body["message"]
    url, _ = await judge_engine("json")
    gw = await gateway([model("m", engine), judge("guard-j", url, "json")])
    with pytest.raises(openai.NotFoundError) as missing:
        await gw.client().moderations.create(model="m", input="hello")  # a model, but not a judge
    assert "guard-j" in missing.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        await gw.client().moderations.create(input=[])
    assert bad.value.body["param"] == "input"
    with pytest.raises(openai.AuthenticationError):
        gw2 = await gateway([judge("guard-j", url, "json")], keys={"sk-a": principal("key-a")})
        await gw2.client("sk-nope").moderations.create(input="hello")


def test_judge_category_names_map_to_openai_categories():
    from llmgw.router.handlers_moderations import openai_categories

    assert openai_categories(("Non-violent Illegal Acts",)) == {"illicit"}
    assert openai_categories(("Non-Violent Crimes",)) == {"illicit"}
    assert openai_categories(("Violent Crimes",)) == {"violence", "illicit/violent"}
    assert openai_categories(("Sexual Content or Sexual Acts",)) == {"sexual"}
    assert openai_categories(("Suicide & Self-Harm",)) == {"self-harm"}
    assert openai_categories(("Child Sexual Exploitation",)) == {"sexual/minors", "sexual"}
    assert openai_categories(("Indiscriminate Weapons",)) == {"illicit/violent", "illicit"}
    assert openai_categories(("Privacy", "Elections")) == set(), "no OpenAI word for these: flagged, no category"


async def test_a_judge_that_gives_no_verdict_is_a_503_with_retry_after(gateway, judge_engine):
    url, _ = await judge_engine("garbled")
    gw = await gateway([judge("guard-j", url, "json")])
    with pytest.raises(openai.InternalServerError) as failed:
        await gw.client().moderations.create(input="hello")
    assert failed.value.status_code == 503 and failed.value.body["code"] == "judge_unavailable"
    assert failed.value.response.headers["Retry-After"] == "2"
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome) == (503, "error")


async def test_a_key_over_its_limit_is_refused_moderation(gateway, judge_engine):
    from llmgw.accounting.api import LimitExceeded

    url, seen = await judge_engine("json")
    gw = await gateway([judge("guard-j", url, "json")], keys={"sk-a": principal("key-a")})
    gw.accountant.refuse["guard-j"] = LimitExceeded("budget_exceeded", "project prj-1 has spent its budget",
                                                    scope="project", retry_after=None)
    with pytest.raises(openai.RateLimitError) as refused:
        await gw.client("sk-a").moderations.create(input="hello")
    assert refused.value.body["code"] == "budget_exceeded" and not seen, "the judge was not asked"
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome) == (429, "refused")


async def test_a_key_held_in_the_cluster_is_not_moderated_by_a_judge_outside_it(gateway, judge_engine):
    """Residency: a judge served by an external provider never gets a kept key's texts; a judge the cluster
    runs moderates them."""
    import attrs

    from llmgw.router.replicas import Replica

    url, seen = await judge_engine("json")
    kept = attrs.evolve(principal("key-k"), in_cluster="key")
    gw = await gateway([judge("guard-j", url, "json")], keys={"sk-k": kept, "sk-f": principal("key-f")})
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await gw.client("sk-k").moderations.create(input="kept words")
    assert refused.value.body["code"] == "residency_in_cluster" and not seen
    assert (await gw.client("sk-f").moderations.create(input="free words")).results[0].flagged is False
    assert len(seen) == 1

    inside, seen_inside = await judge_engine("json")
    gw.gateway.replicas.add(Replica(id="guard-j/n1", model="guard-j", base_url=inside, source="control"))
    answer = await gw.client("sk-k").moderations.create(input="kept words")
    assert answer.results[0].flagged is False
    assert len(seen_inside) == 1 and len(seen) == 1
