"""max_tokens fitted to what the model's context leaves after the prompt.

Clients written for hosted models ask for answers longer than a local
model's context can hold (Claude Code sends max_tokens 32000, pydantic-ai
16384); an engine with an 8192-token context refuses such a request whole.
The gateway lowers the request's max_tokens (max_completion_tokens, and so
Anthropic's max_tokens and the Responses API's max_output_tokens, which
reach the pipeline as chat completions) to the context minus the prompt,
and says so in `x-llmgw-max-tokens-fitted`. A project that turned on
`llmgw keys strict-max-tokens` gets a 400 instead, in its API's shape.

The context is what the model's engines say (llmgw.router.threads.engine_context);
a model whose engines do not say (a provider's API) is never fitted. The
prompt is counted by the engine itself where it can (POST /tokenize: vLLM,
SGLang, the sim engine), else estimated generously
(llmgw.router.threads.estimate_tokens). Nothing is asked of anyone while
the prompt's bytes and max_tokens fit the context anyway, which is nearly
every request: a token is never shorter than a byte.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from llmgw.obs import logs
from llmgw.router.errors import GatewayError, dumps
from llmgw.router.gateway import Gateway
from llmgw.router.threads import MESSAGE_OVERHEAD, engine_context, estimate_tokens

log = logs.get("llmgw.router.fit")

#: The answer header saying what max_tokens the engine was sent instead of the client's.
FITTED_HEADER = "x-llmgw-max-tokens-fitted"
#: The chat-completion fields that bound an answer, as the pipeline sees them.
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")
#: The client's own name of that field, by the API it spoke (a dialect's operation).
CLIENT_FIELD = {"messages": "max_tokens", "responses": "max_output_tokens"}
#: Seconds the engine is given to count a prompt before the estimate is used.
TOKENIZE_TIMEOUT = 2.0


def asked_tokens(body: dict) -> tuple[str, int] | None:
    """The field and value bounding the answer's length, or None when the request sets none."""
    for name in LIMIT_FIELDS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None


async def fit_max_tokens(gw: Gateway, call: Any, model: str, body_bytes: bytes, body: dict,
                         strict: Any) -> tuple[bytes, dict]:
    """The body with its max_tokens lowered to what `model`'s context leaves, and the header set.

    `strict` is awaited only when the request does not fit: whether the key's
    project wants a 400 instead (a store read, cached)."""
    if call.kind not in ("chat", "completion"):
        return body_bytes, body
    asked = asked_tokens(body)
    if asked is None:
        return body_bytes, body
    field, wanted = asked
    context = await engine_context(gw, gw.context_lengths, model)
    if context is None or wanted + len(body_bytes) <= context:
        return body_bytes, body
    counted = await _count_prompt(gw, model, call.kind, body)
    exact = counted is not None
    prompt = counted if exact else _estimate(call.kind, body)
    room = context - prompt
    if wanted <= room:
        return body_bytes, body
    if room < 1 and exact:  # the prompt alone fills the context: the engine refuses it, in its own words
        return body_bytes, body
    param = CLIENT_FIELD.get(getattr(call.dialect, "operation", ""), field)
    if await strict():
        raise GatewayError(
            400, "context_length_exceeded",
            f"{param}: {wanted} answer tokens asked for, but {model}'s context of {context} tokens leaves "
            f"{max(room, 0)} after the prompt's {prompt}{'' if exact else ' (estimated)'}; ask for at most "
            f"{max(room, 1)}, or send a shorter prompt (this project refuses what does not fit: "
            "llmgw keys strict-max-tokens)", param=param)
    fitted = max(1, room)
    out = dict(body)
    for name in LIMIT_FIELDS:
        if isinstance(out.get(name), int) and not isinstance(out.get(name), bool) and out[name] > fitted:
            out[name] = fitted
    call.headers[FITTED_HEADER] = str(fitted)
    logs.event(log, "max_tokens fitted", logging.INFO, request_id=call.request_id, model=model, asked=wanted,
               fitted=fitted, context=context, prompt_tokens=prompt, counted=exact)
    return dumps(out), out


async def project_is_strict(request: Any, principal: Any) -> bool:
    """Whether the key's project turned on `llmgw keys strict-max-tokens` (off without a store)."""
    from llmgw.router.client_data import CLIENT_DATA

    data = request.app.get(CLIENT_DATA)
    if data is None or data.store is None or not getattr(principal, "project_id", None):
        return False
    return (await data.features(principal.project_id)).strict_max_tokens


def _estimate(kind: str, body: dict) -> int:
    """A generous count of the prompt's tokens when no engine counts them."""
    if kind == "chat":
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        tools = body.get("tools")
        extra = len(dumps(tools)) // 3 + MESSAGE_OVERHEAD if tools else 0
        return estimate_tokens([m for m in messages if isinstance(m, dict)]) + extra
    return len(dumps(body.get("prompt"))) // 3 + MESSAGE_OVERHEAD


async def _count_prompt(gw: Gateway, model: str, kind: str, body: dict) -> int | None:
    """The prompt's tokens as one of the model's engines counts them (POST /tokenize), or None."""
    session = gw.upstream.session
    if session is None:
        return None
    if kind == "chat":
        ask: dict[str, Any] = {"messages": body.get("messages")}
        if body.get("tools"):
            ask["tools"] = body["tools"]
    elif isinstance(body.get("prompt"), str):
        ask = {"prompt": body["prompt"]}
    else:
        return None  # several prompts, or token ids: the estimate
    for replica in gw.replicas.replicas_for(model)[:2]:
        headers = {"Authorization": "Bearer " + replica.api_key.reveal()} if replica.api_key is not None else {}
        url = replica.base_url.removesuffix("/v1") + "/tokenize"
        try:
            async with session.post(url, json={"model": replica.name_at_engine, **ask}, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT)) as resp:
                if resp.status != 200:
                    continue
                answer = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logs.event(log, "prompt not counted", logging.DEBUG, replica_id=replica.id, error=repr(exc))
            continue
        count = answer.get("count") if isinstance(answer, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
    return None


__all__ = ["CLIENT_FIELD", "FITTED_HEADER", "asked_tokens", "fit_max_tokens", "project_is_strict"]
