"""`POST /v1/moderations`, answered by the cluster's judge models (`role: guard`).

OpenAI's moderation request (`input`: a text, a list of texts, or a list of
parts whose text is read as one input) is asked of a judge, through the
judge format its catalog entry names (`guard.format`, a plugin): the same
question the guardrails ask of a user's message. Its verdict comes back in
OpenAI's shape, one result a text: `flagged`, and the judge's categories
mapped to OpenAI's (`CATEGORY_WORDS`); a judge gives a verdict, not a
probability, so a category's score is 1.0 when the judge named it and 0.0
when not. The judge's own names are in `llmgw_categories`, since a
category OpenAI has no word for (privacy, elections) still flags.

Which judge: `model` when it names one, else the first in server.yaml
(OpenAI's names, `omni-moderation-latest` and `text-moderation-*`, mean
that one too). A cluster with no judge answers 400 `no_judge_model`.

It runs as every other request does: the key, its limits and budget, room
on the judge's replica in the key's band, one usage row with the tokens the
judge read and wrote, and the request metrics (`llmgw.router.pipeline`'s
own settling and recording).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from aiohttp import web

from llmgw.accounting.api import LimitExceeded
from llmgw.guard.judge import Judge, JudgeModel, JudgeUnavailable, judge_models
from llmgw.guard.policy import JudgeRules
from llmgw.obs import logs
from llmgw.router import pipeline
from llmgw.router import residency
from llmgw.router.body import read_json_body
from llmgw.router.choose import Want
from llmgw.router.errors import CANCELLED, ERROR, JSON, GatewayError, bad_request, dumps, loads
from llmgw.router.gateway import GATEWAY, REQUEST_ID, Gateway
from llmgw.router.stages.accounting import finish
from llmgw.router.stages.auth import read_request
from llmgw.router.stages.base import answer_headers
from llmgw.router.proxy import UpstreamFailure, read_whole

log = logs.get("llmgw.router")

#: OpenAI's moderation categories, in its order.
OPENAI_CATEGORIES = (
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
    "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
    "violence/graphic",
)
#: Words in a judge's category (Llama Guard's, Qwen3Guard's, a JSON judge's own) and the OpenAI
#: categories they stand for; the first rule whose word is in the name applies.
CATEGORY_WORDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("child", "minor"), ("sexual/minors", "sexual")),
    (("self-harm", "self harm", "suicide"), ("self-harm",)),
    (("sex",), ("sexual",)),
    (("hate",), ("hate",)),
    (("threat",), ("harassment/threatening", "harassment")),
    (("harass", "bully"), ("harassment",)),
    (("weapon",), ("illicit/violent", "illicit")),
    (("non-violent", "non violent", "nonviolent"), ("illicit",)),
    (("violent crime",), ("violence", "illicit/violent")),
    (("illegal", "crime", "drug"), ("illicit",)),
    (("graphic", "gore"), ("violence/graphic", "violence")),
    (("violen",), ("violence",)),
)
#: The names OpenAI's SDKs and docs use for its own models; here they mean the first judge.
OPENAI_MODEL_PREFIXES = ("omni-moderation", "text-moderation")
#: Seconds a judge is waited for when router.timeouts.total sets no limit.
JUDGE_WAIT = 60.0
#: Texts of one request asked of the judge at the same time, at most.
JUDGED_AT_ONCE = 8
#: Tokens held against a budget for each verdict a judge writes.
VERDICT_TOKENS = 32

_FORMATS: dict[str, Any] | None = None


def openai_categories(names: tuple[str, ...]) -> set[str]:
    """The OpenAI categories a judge's category names stand for."""
    out: set[str] = set()
    for name in names:
        folded = name.casefold()
        for words, categories in CATEGORY_WORDS:
            if any(w in folded for w in words):
                out.update(categories)
                break
    return out


def result_of(safe: bool, names: tuple[str, ...]) -> dict[str, Any]:
    """One text's result in OpenAI's shape."""
    flagged = () if safe else names
    hits = openai_categories(flagged)
    return {
        "flagged": not safe,
        "categories": {c: c in hits for c in OPENAI_CATEGORIES},
        "category_scores": {c: 1.0 if c in hits else 0.0 for c in OPENAI_CATEGORIES},
        "category_applied_input_types": {c: ["text"] for c in OPENAI_CATEGORIES},  # what each was judged on
        "llmgw_categories": list(flagged),
    }


def texts_of(value: Any) -> list[str]:
    """The inputs to judge: a text, each of a list of texts, or a list of parts read as one text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, list) and value:
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        text = "\n".join(p for p in parts if isinstance(p, str))
        if text:
            return [text]
        raise bad_request("input: only text is judged here; give a text part ({\"type\": \"text\", ...})",
                          param="input")
    raise bad_request("input: a text, a list of texts, or a list of parts", param="input")


def _formats(gw: Gateway) -> dict[str, Any]:
    judge = getattr(gw.guard, "judge", None)
    if judge is not None:
        return judge.formats
    global _FORMATS
    if _FORMATS is None:
        from llmgw.plugins.manager import load_plugins

        _FORMATS = load_plugins().judge_formats()
    return _FORMATS


def choose_judge(gw: Gateway, asked: Any) -> tuple[str, JudgeModel]:
    judges = judge_models(gw.config.models)
    if not judges:
        raise bad_request("no judge model is configured here, so nothing can moderate: an operator adds a model "
                          "with `role: guard` (and its `guard.format`) to server.yaml's models",
                          param="model", code="no_judge_model")
    if isinstance(asked, str) and asked in judges:
        return judges[asked].name, judges[asked]
    if asked is None or (isinstance(asked, str) and asked.startswith(OPENAI_MODEL_PREFIXES)):
        first = next(iter(judges.values()))
        return first.name, first
    names = ", ".join(dict.fromkeys(j.name for j in judges.values()))
    raise GatewayError(404, "model_not_found", f"no judge model called {asked!r} moderates here; the judges: {names}",
                       param="model")


class ClientJudgeTransport:
    """A judge asked for a client: room on its replica in the key's band, the tokens added to the call."""

    def __init__(self, gw: Gateway, call: pipeline.Call, deadline: float | None, *, cluster_only: bool = False) -> None:
        self.gw, self.call, self.deadline = gw, call, deadline
        self.cluster_only = cluster_only  #: residency: only the judge's replicas the cluster runs

    def ready(self, model: str) -> str | None:
        replicas = self.gw.replicas.replicas_for(model)
        if self.cluster_only:
            replicas = [r for r in replicas if residency.in_cluster(r)]
        return None if replicas else "unavailable"

    async def ask(self, model: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        gw, call = self.gw, self.call
        # a GatewayError: the client's answer
        grant = await gw.admission.acquire(model, call.band, Want(cluster_only=self.cluster_only))
        try:
            replica = grant.replica
            call.replica, call.model_served = replica.id, model
            call.queue_s = max(call.queue_s or 0.0, grant.waited)
            data = dumps({**body, "model": replica.name_at_engine, "stream": False})
            try:
                resp = await gw.upstream.open(replica, path, data, request_id=call.request_id, stream=False,
                                              deadline=self.deadline)
            except UpstreamFailure as failure:
                if failure.counts:
                    replica.failed(failure.code)
                raise JudgeUnavailable("unavailable", failure.message) from None
            try:
                raw = await read_whole(resp, self.deadline)
            finally:
                resp.release()
            if resp.status >= 400:
                raise JudgeUnavailable("error", f"the judge {model!r} answered {resp.status}")
            replica.succeeded()
            answer = loads(raw)
            usage = answer.get("usage") if isinstance(answer, dict) else None
            if isinstance(usage, dict):
                call.usage_known = True
                call.prompt_tokens += _count(usage.get("prompt_tokens"))
                call.completion_tokens += _count(usage.get("completion_tokens"))
            return answer
        finally:
            gw.admission.release(grant)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


async def moderations(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    call = pipeline.Call(request_id=request.get(REQUEST_ID) or pipeline.new_request_id(), kind="moderation",
                         path="/moderations")
    reservation = None
    try:
        call.principal = principal = await gw.authenticate(request)
        body_bytes, body = await read_json_body(request, gw, "moderation")
        texts = texts_of(body.get("input"))
        name, judge_model = choose_judge(gw, body.get("model"))
        call.model_asked = body["model"] if isinstance(body.get("model"), str) else name
        call.model = name
        read_request(call, request, {**body, "model": call.model_asked})
        kept = residency.in_cluster_reason(gw, principal)
        if kept and not residency.served_in_cluster(gw, name):
            raise residency.refusal(name, kept)  # the texts would leave the cluster for the judge
        reservation = await gw.accountant.admit(principal, name, prompt_tokens=max(1, len(body_bytes) // 4),
                                                max_tokens=VERDICT_TOKENS * len(texts))
        call.band = gw.band_for(request, principal)
        total = gw.timeouts.total
        deadline = call.started + total if total else None
        transport = ClientJudgeTransport(gw, call, deadline, cluster_only=bool(kept))
        judge = Judge({name: judge_model}, _formats(gw), transport, cache_seconds=0)
        rules = JudgeRules(models=(name,), input="flag", latency_budget=total or JUDGE_WAIT)
        room = asyncio.Semaphore(JUDGED_AT_ONCE)

        async def verdict(text: str):
            async with room:
                return await judge.ask(rules, [{"role": "user", "content": text}], "user")

        answers = await asyncio.gather(*(verdict(t) for t in texts))
        if any(a.verdict is None for a in answers):
            reasons = sorted({reason for a in answers for _, reason in a.errors})
            raise GatewayError(503, "judge_unavailable",
                               f"the judge {name!r} could not give a verdict now ({', '.join(reasons)}); retry shortly",
                               outcome=ERROR, retry_after=2, type="server_error")
        results = [result_of(a.verdict.safe, tuple(a.verdict.categories)) for a in answers]
        out = {"id": "modr-" + secrets.token_hex(12), "model": name, "results": results}
        return web.Response(body=dumps(out), content_type=JSON, headers=answer_headers(call))
    except GatewayError as exc:
        call.status, call.outcome, call.code, call.limited = exc.status, exc.outcome, exc.code, exc.limited
        return exc.response(answer_headers(call))
    except LimitExceeded as exc:
        # exc.status: 429, or 503 when the shared limits store is down (limits.on_store_down: refuse)
        call.status, call.outcome, call.code, call.limited = exc.status, "refused", exc.code, True
        return GatewayError(exc.status, exc.code, exc.message, retry_after=exc.retry_after,
                            limited=True).response()
    except asyncio.CancelledError:
        call.status, call.outcome = pipeline.CLIENT_CLOSED, CANCELLED
        raise
    finally:
        await finish(gw, call, reservation)


__all__ = ["CATEGORY_WORDS", "OPENAI_CATEGORIES", "choose_judge", "moderations", "openai_categories",
           "result_of", "texts_of"]
