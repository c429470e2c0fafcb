"""The simulated engine's HTTP face: OpenAI's API, vLLM's extras, /metrics.

`make_app` builds the aiohttp application for an `Engine`; `start` binds it
and returns a `RunningEngine` (tests and benchmarks start engines in
process with it); `serve` is what `llmgw sim-engine` runs until a signal.

Streams are written chunk by chunk as tokens fall due. Chunks are put
together from bytes prepared once per request and tokens encoded once per
process, so a token costs a few concatenations, not a JSON encoding.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import signal
import sys
import time
from array import array

import attrs
from aiohttp import web

from llmgw import __version__
from llmgw.simengine import adapters as sim_adapters
from llmgw.simengine import embeddings, scoring
from llmgw.simengine.engine import Choice, Engine, request_id
from llmgw.simengine.logprobs import chat_logprobs, chat_token, completion_logprobs
from llmgw.simengine.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from llmgw.simengine.options import SimOptions
from llmgw.simengine.protocol import (
    JSON_CONTENT_TYPE,
    APIError,
    Plan,
    dumps,
    parse_chat,
    parse_completion,
    parse_embedding,
    parse_tokenize,
    read_json,
)
from llmgw.simengine.tokens import PIECE_JSON, token_id

ENGINE = web.AppKey("engine", Engine)
MODELS_BODY = web.AppKey("models_body", bytes)

# Prompts can be long: vLLM takes bodies far past aiohttp's 1 MiB default.
MAX_BODY_BYTES = 64 * 1024 * 1024
# Paths that demand the key when one is set, as vLLM guards them; /health and
# /metrics stay open for supervisors and scrapers.
GUARDED_PREFIXES = ("/v1", "/tokenize", "/rerank")

_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"


def _piece_json(piece: str) -> bytes:
    return PIECE_JSON.get(piece) or dumps(piece)


def _json(body) -> web.Response:
    return web.Response(body=dumps(body), content_type=JSON_CONTENT_TYPE)


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


# --- generation ---------------------------------------------------------------

async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_chat)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_completion)


async def _generate(request: web.Request, parse) -> web.StreamResponse:
    arrival = asyncio.get_running_loop().time()
    engine = request.app[ENGINE]
    try:
        plan = sim_adapters.parse_with(parse, await read_json(request), engine)  # adapters: a request for one
        choices = engine.answer(plan)
        engine.maybe_fail()
    except APIError as exc:
        return exc.response()
    if plan.stream:
        return await _stream(request, engine, plan, choices, arrival)
    new_tokens = sum(c.tokens for c in choices)
    longest = max(c.tokens for c in choices)
    async with engine.running(plan.model, plan.prompts, new_tokens, arrival) as run:
        await run.first_token()
        await run.token(max(longest, 1) - 1)
        run.done(new_tokens, longest, choices[0].finish_reason)
    usage = _usage(plan.prompt_tokens, new_tokens, run.cached_tokens)
    created = int(time.time())
    if plan.kind == "chat":
        return _json({
            "id": request_id("chatcmpl-"), "object": "chat.completion", "created": created,
            "model": plan.model, "choices": [_chat_choice(c, plan) for c in choices], "usage": usage,
        })
    return _json({
        "id": request_id("cmpl-"), "object": "text_completion", "created": created,
        "model": plan.model,
        "choices": [{"index": c.index, "text": c.text,
                     "logprobs": completion_logprobs(c.pieces, plan.top_logprobs, len(c.echo)) if plan.logprobs
                     else None,
                     "finish_reason": c.finish_reason} for c in choices],
        "usage": usage,
    })


def _chat_choice(choice: Choice, plan: Plan) -> dict:
    if choice.tool_call is None:
        message = {"role": "assistant", "content": choice.text, "tool_calls": []}
    else:
        call = choice.tool_call
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }]}
    logprobs = None
    if plan.logprobs and choice.tool_call is None:
        logprobs = chat_logprobs(choice.pieces, plan.top_logprobs)
    return {"index": choice.index, "message": message, "logprobs": logprobs,
            "finish_reason": choice.finish_reason}


@attrs.define(slots=True)
class _ChunkFormat:
    """The bytes around every chunk of one stream, prepared once."""

    head: bytes  # `data: {...,"choices":[{"index":`
    open_delta: bytes  # after the index, before the choice's payload
    tail: bytes  # closes a chunk that does not finish its choice
    usage_null: bytes

    def chunk(self, index: int, payload: bytes) -> bytes:
        return self.head + str(index).encode() + self.open_delta + payload + self.tail

    def finish(self, index: int, empty: bytes, reason: str) -> bytes:
        return (self.head + str(index).encode() + self.open_delta + empty
                + b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]'
                + self.usage_null + b"}\n\n")


async def _stream(request: web.Request, engine: Engine, plan: Plan, choices: list[Choice],
                  arrival: float) -> web.StreamResponse:
    chat = plan.kind == "chat"
    rid = request_id("chatcmpl-" if chat else "cmpl-")
    created = int(time.time())
    obj = "chat.completion.chunk" if chat else "text_completion"
    usage_null = b',"usage":null' if plan.include_usage else b""
    fmt = _ChunkFormat(
        head=(b'data: {"id":"' + rid.encode() + b'","object":"' + obj.encode() + b'","created":'
              + str(created).encode() + b',"model":' + dumps(plan.model) + b',"choices":[{"index":'),
        open_delta=b',"delta":' if chat else b',"text":',
        tail=b',"logprobs":null,"finish_reason":null}]' + usage_null + b"}\n\n",
        usage_null=usage_null,
    )
    steps = _steps(fmt, chat, choices, plan)
    response = web.StreamResponse(headers=_SSE_HEADERS)
    await response.prepare(request)
    new_tokens = sum(c.tokens for c in choices)
    try:
        async with engine.running(plan.model, plan.prompts, new_tokens, arrival) as run:
            await run.first_token()
            # Chunks that fall due together go out in one write; a chunk due
            # later waits for its time. With --tpot 0 a stream is one write.
            pending = [steps[0]]
            for k in range(1, len(steps)):
                if not run.is_due(k):
                    await response.write(b"".join(pending))
                    pending.clear()
                    await run.token(k)
                pending.append(steps[k])
            run.done(new_tokens, max(c.tokens for c in choices), choices[0].finish_reason)
        if plan.include_usage:
            usage = _usage(plan.prompt_tokens, new_tokens, run.cached_tokens)
            pending.append(b"data: " + dumps({
                "id": rid, "object": obj, "created": created, "model": plan.model,
                "choices": [], "usage": usage}) + b"\n\n")
        pending.append(_DONE)
        await response.write(b"".join(pending))
        await response.write_eof()
    except ConnectionResetError:  # the client went away; its slot is already free
        pass
    return response


def _logprobs_tail(fmt: _ChunkFormat, chat: bool, plan: Plan, piece: str, position: int, offset: int) -> bytes:
    """A chunk's end carrying its token's log probabilities, in place of `"logprobs":null`."""
    if chat:
        value = {"content": [chat_token(piece, position, plan.top_logprobs)], "refusal": None}
    else:
        value = completion_logprobs([piece], plan.top_logprobs, offset)
    return fmt.tail.replace(b'"logprobs":null', b'"logprobs":' + dumps(value), 1)


def _steps(fmt: _ChunkFormat, chat: bool, choices: list[Choice], plan: Plan) -> list[bytes]:
    """The stream's bytes, one item per output token's time: step k holds
    every choice's k-th chunk, and the finish chunk of each choice ending there."""
    per_choice = []
    empty = b"{}" if chat else b'""'
    for c in choices:
        head = fmt.head + str(c.index).encode() + fmt.open_delta
        if not chat:
            before, after = head, fmt.tail
        elif c.tool_call is None:
            before, after = head + b'{"content":', b"}" + fmt.tail
        else:
            before = head + b'{"tool_calls":[{"index":0,"function":{"arguments":'
            after = b"}}]}" + fmt.tail
        if plan.logprobs and c.tool_call is None:  # each token's chunk says its log probability
            cut = len(fmt.tail)
            offsets, at = [], len(c.echo)
            for piece in c.pieces:
                offsets.append(at)
                at += len(piece)
            chunks = [before + _piece_json(piece) + after[:len(after) - cut]
                      + _logprobs_tail(fmt, chat, plan, piece, i, offsets[i]) for i, piece in enumerate(c.pieces)]
        else:
            chunks = [before + _piece_json(piece) + after for piece in c.pieces]
        finish = fmt.finish(c.index, empty, c.finish_reason)
        if chunks:
            chunks[-1] += finish
        else:
            chunks.append(finish)
        if chat and c.tool_call is not None:
            first = fmt.chunk(c.index, dumps({
                "role": "assistant", "content": None, "tool_calls": [{
                    "index": 0, "id": c.tool_call.id, "type": "function",
                    "function": {"name": c.tool_call.name, "arguments": ""}}]}))
        elif chat:
            first = fmt.chunk(c.index, b'{"role":"assistant","content":""}')
        else:
            first = fmt.chunk(c.index, dumps(c.echo)) if c.echo else b""
        chunks[0] = first + chunks[0]
        per_choice.append(chunks)
    if len(per_choice) == 1:
        return per_choice[0]
    longest = max(map(len, per_choice))
    return [b"".join(chunks[k] for chunks in per_choice if k < len(chunks)) for k in range(longest)]


# --- embeddings, models, tokenize ---------------------------------------------

async def embeddings_handler(request: web.Request) -> web.Response:
    arrival = asyncio.get_running_loop().time()
    engine = request.app[ENGINE]
    try:
        plan = parse_embedding(await read_json(request), engine.options)
        engine.maybe_fail()
    except APIError as exc:
        return exc.response()
    dim = engine.options.embedding_dim
    async with engine.running(plan.model, plan.prompts, 0, arrival) as run:
        await run.first_token()
        run.done(0, 0, "stop")
    data = []
    for i, prompt in enumerate(plan.prompts):
        vector = embeddings.embed(prompt.text, prompt.tokens, dim, plan.dimensions)
        if plan.encoding_format == "base64":
            packed = array("f", vector)
            if sys.byteorder == "big":  # pragma: no cover - the wire format is little-endian
                packed.byteswap()
            vector = base64.b64encode(packed.tobytes()).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    tokens = run.prompt_tokens
    return _json({"id": request_id("embd-"), "object": "list", "created": int(time.time()),
                  "model": plan.model, "data": data,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def tokenize_handler(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    try:
        body = await read_json(request)
        _, toks = parse_tokenize(body, engine.options)
    except APIError as exc:
        return exc.response()
    return _json({"count": len(toks), "max_model_len": engine.options.context_length,
                  "tokens": [token_id(t) for t in toks],
                  "token_strs": toks if body.get("return_token_strs") else None})


async def models_handler(request: web.Request) -> web.Response:
    body = sim_adapters.models_body(request.app[MODELS_BODY], request.app[sim_adapters.ADAPTERS], int(time.time()),
                                    request.app[ENGINE].options.context_length)  # adapters: listed after
    return web.Response(body=body, content_type=JSON_CONTENT_TYPE)


async def health_handler(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version_handler(request: web.Request) -> web.Response:
    return _json({"version": f"llmgw-sim-engine {__version__}"})


async def metrics_handler(request: web.Request) -> web.Response:
    body = request.app[ENGINE].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def _models_body(options: SimOptions) -> bytes:
    created = int(time.time())
    return dumps({"object": "list", "data": [
        {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": name,
         "parent": None, "max_model_len": options.context_length, "permission": []}
        for name in options.models]})


def _key_middleware(api_key: str):
    expected = b"Bearer " + api_key.encode()
    refusal = APIError(401, "Incorrect API key provided.", code="invalid_api_key")

    @web.middleware
    async def require_key(request: web.Request, handler) -> web.StreamResponse:
        if request.path.startswith(GUARDED_PREFIXES):
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return refusal.response()
        return await handler(request)

    return require_key


# --- the application and its server ---------------------------------------------

def make_app(options: SimOptions) -> web.Application:
    """The engine's aiohttp application; each has its own engine, cache and metrics."""
    middlewares = [_key_middleware(options.api_key)] if options.api_key else []
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    app[ENGINE] = Engine(options)
    app[sim_adapters.ADAPTERS] = app[ENGINE].adapters = sim_adapters.Adapters(
        options.models[0], options.max_loras, options.lora_modules)
    app[MODELS_BODY] = _models_body(options)
    app.router.add_routes([
        web.post("/v1/chat/completions", chat_completions),
        web.post("/v1/completions", completions),
        web.post("/v1/embeddings", embeddings_handler),
        web.post("/v1/rerank", scoring.rerank_handler),
        web.post("/rerank", scoring.rerank_handler),
        web.post("/v1/score", scoring.score_handler),
        web.get("/v1/models", models_handler),
        web.post("/v1/load_lora_adapter", sim_adapters.load_handler),
        web.post("/v1/unload_lora_adapter", sim_adapters.unload_handler),
        web.post("/tokenize", tokenize_handler),
        web.get("/health", health_handler),
        web.get("/version", version_handler),
        web.get("/metrics", metrics_handler),
    ])
    return app


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@attrs.define
class RunningEngine:
    """An engine listening in this process; `async with` closes it."""

    app: web.Application
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """The base URL, without /v1."""
        return _url(self.host, self.port)

    @property
    def engine(self) -> Engine:
        return self.app[ENGINE]

    async def close(self) -> None:
        await self.runner.cleanup()

    async def __aenter__(self) -> RunningEngine:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def start(options: SimOptions, *, shutdown_timeout: float = 2.0) -> RunningEngine:
    """Bind `options.host:options.port` (0: any free port) and start answering."""
    app = make_app(options)
    # handler_cancellation: a client that leaves cancels its request, which
    # frees its batch slot at once even while it waits or prefills.
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                           shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site = web.TCPSite(runner, options.host, options.port, backlog=1024)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    port = runner.addresses[0][1]
    return RunningEngine(app=app, runner=runner, host=options.host, port=port)


async def serve(options: SimOptions) -> None:
    """Run the engine until SIGINT or SIGTERM; print where it listens first."""
    server = await start(options)
    print(f"listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    try:
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await server.close()
