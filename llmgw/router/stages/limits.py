"""limits: the request's cost held against the key's limits and budgets (a spent budget moves it to a
fallback), after max_tokens is lowered to what the context leaves (llmgw.router.fit); the x-ratelimit-*
headers of what is left, on the answer and on a refusal for a limit. Accounting settles the hold."""

from __future__ import annotations

from llmgw.accounting.api import LimitExceeded, Reservation
from llmgw.auth.principal import Principal
from llmgw.router.errors import GatewayError
from llmgw.router.fit import fit_max_tokens, project_is_strict
from llmgw.router.gateway import Gateway
from llmgw.router.ratelimit_headers import rate_headers
from llmgw.router.stages.base import NOT_GENERATED, Call, Turn, span

#: Tokens held against a budget for an answer whose request sets no max_tokens.
DEFAULT_MAX_TOKENS = 1024


class LimitsStage:
    name = "limits"

    async def enter(self, turn: Turn) -> None:
        gw, call, request = turn.gw, turn.call, turn.request
        principal = call.principal
        # max_tokens lowered to what the context leaves, before the budget holds on it (llmgw.router.fit)
        turn.body_bytes, turn.body = await fit_max_tokens(gw, call, turn.model, turn.body_bytes, turn.body,
                                                          lambda: project_is_strict(request, principal))
        with span(call, "limits"):
            turn.reservation, turn.model = await admit(gw, call, principal, turn.model, turn.body_bytes, turn.body)
        call.headers.update(limit_headers(gw, call))  # what is left of the key's limits, this request counted

    async def leave(self, turn: Turn) -> None:
        call = turn.call
        if call.limited and call.principal is not None and turn.answer is not None:  # refused for a limit
            turn.answer.headers.update(limit_headers(turn.gw, call))


def max_tokens_of(body: dict) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > 0:
            n = body.get("n")
            return value * (n if isinstance(n, int) and n > 0 else 1)
    return DEFAULT_MAX_TOKENS


async def admit(gw: Gateway, call: Call, principal: Principal, model: str, body_bytes: bytes,
                body: dict) -> tuple[Reservation, str]:
    """Hold the request's cost; a spent budget tries the model's fallbacks, in order."""
    prompt_estimate = max(1, len(body_bytes) // 4)
    max_tokens = 0 if call.kind in NOT_GENERATED else max_tokens_of(body)
    try:
        return await gw.accountant.admit(principal, model, prompt_tokens=prompt_estimate,
                                         max_tokens=max_tokens), model
    except LimitExceeded as exc:
        refusal = exc
    if refusal.code == "budget_exceeded":
        for fallback in gw.catalog.fallbacks(model):
            if not principal.may_use(fallback):
                continue
            try:
                reservation = await gw.accountant.admit(principal, fallback, prompt_tokens=prompt_estimate,
                                                        max_tokens=max_tokens)
            except LimitExceeded:
                continue
            gw.metrics.fallbacks.labels(model, fallback, "budget").inc()
            return reservation, fallback
    # 503 when the shared limits store is down and limits.on_store_down is refuse (llmgw.accounting.limits_redis)
    raise GatewayError(refusal.status, refusal.code, refusal.message, retry_after=refusal.retry_after, limited=True)


def limit_headers(gw: Gateway, call: Call) -> dict[str, str]:
    """x-ratelimit-* (anthropic-ratelimit-* on /v1/messages) from the key's own limits."""
    anthropic = getattr(call.dialect, "operation", None) == "messages"
    return rate_headers(gw.accountant, call.principal, anthropic=anthropic)
