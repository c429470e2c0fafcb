"""The simulated engine: what it answers, and when.

`Engine.answer` decides every choice's tokens up front (they depend only on
the request and the seeds). `Engine.running` then plays the request out in
time: wait for a batch slot, look the prompt up in the prefix cache, prefill
(`ttft` plus `prefill_per_token` for each uncached token), then one token
every `tpot`. The HTTP handlers only write what it decides.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from llmgw.simengine import structured, tokens
from llmgw.simengine.metrics import SimMetrics
from llmgw.simengine.options import SimOptions
from llmgw.simengine.prefix_cache import PrefixCache
from llmgw.simengine.protocol import APIError, Plan, Prompt, dumps
from llmgw.simengine.scheduler import BatchScheduler

_NO_SEED = -1
#: A model whose name starts with this answers with what it was sent (the last user
#: message, or the prompt), so tests can see what reached the engine.
ECHO_PREFIX = "echo"


@attrs.define(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@attrs.define(slots=True)
class Choice:
    """One choice of an answer, decided before any of it is sent."""

    index: int
    # Content pieces in the order they are sent: text, or a tool call's arguments.
    pieces: list[str]
    finish_reason: str
    # Tokens the choice counts in usage: a stop string's tokens count, unsent.
    tokens: int
    tool_call: ToolCall | None = None
    # The prompt, sent first, for a completion with `echo`.
    echo: str = ""

    @property
    def text(self) -> str:
        return self.echo + "".join(self.pieces)


def _apply_stop(pieces: list[str], stops: tuple[str, ...]) -> tuple[list[str], int] | None:
    """The pieces before the first stop string and the tokens spent reaching
    its end, or None when no stop string occurs."""
    text = "".join(pieces)
    cut = end = -1
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (cut < 0 or at < cut):
            cut, end = at, at + len(stop)
    if cut < 0:
        return None
    kept: list[str] = []
    spent = offset = 0
    for piece in pieces:
        if offset >= end:
            break
        spent += 1
        if offset < cut:
            kept.append(piece if offset + len(piece) <= cut else piece[: cut - offset])
        offset += len(piece)
    return kept, spent


def _echo_choice(plan: Plan, prompt: Prompt, index: int, budget: int) -> Choice:
    """An echo model's answer: the text it was sent, cut at the answer's length."""
    pieces = tokens.split_text(plan.last_user if plan.kind == "chat" else prompt.text)
    if len(pieces) > budget:
        return Choice(index, pieces[:budget], "length", budget)
    return Choice(index, pieces, "stop", len(pieces))


class Engine:
    """One simulated engine: its slots, its prefix cache, its metrics."""

    def __init__(self, options: SimOptions) -> None:
        self.options = options
        self.scheduler = BatchScheduler(options.max_num_seqs)
        self.cache = PrefixCache(options.block_size, options.kv_cache_blocks,
                                 enabled=options.prefix_caching)
        # KV blocks that running requests hold: prompt plus the answer's room.
        self.held_blocks = 0
        self.metrics = SimMetrics(
            options.model_label,
            running=lambda: self.scheduler.running,
            waiting=lambda: self.scheduler.waiting,
            cache_usage=self.cache_usage,
        )
        self._faults = random.Random(options.seed)
        # Each model's blocks hash from their own root: models share no prefixes.
        self._roots = {m: tokens.digest(m) for m in options.models}
        #: adapters: the LoRA adapters it holds (llmgw.simengine.adapters), set by the server
        self.adapters = None

    def cache_usage(self) -> float:
        return min(1.0, self.held_blocks / self.options.kv_cache_blocks)

    # --- deciding the answer ---------------------------------------------

    def maybe_fail(self) -> None:
        rate = self.options.fail_rate
        if rate and self._faults.random() < rate:
            raise APIError(500, f"simulated failure (--fail-rate {rate})", code="internal_error")

    def budgets(self, plan: Plan) -> list[tuple[int, str]]:
        """Per prompt, how many tokens to answer with and the finish reason
        when nothing ends the answer sooner; a 400 past the context length."""
        ctx = self.options.context_length
        out = []
        for prompt in plan.prompts:
            used = len(prompt.tokens)
            wanted = plan.max_tokens
            if used + (wanted or 0) > ctx or used >= ctx:
                asked = used + (wanted or 0)
                raise APIError(
                    400,
                    f"This model's maximum context length is {ctx} tokens. However, you requested "
                    f"{asked} tokens ({used} in the messages, {wanted or 0} in the completion). "
                    f"Please reduce the length of the messages or completion.",
                    param="messages" if plan.kind == "chat" else "prompt",
                    code="context_length_exceeded",
                )
            ends = self.options.answer_tokens
            if wanted is not None and ends and wanted > ends:  # the "model" is done before the limit
                out.append((ends, "stop"))
            elif wanted is not None:
                out.append((wanted, "length"))
            else:  # no limit asked: the "model" ends on its own, or at the context's end
                default = self.options.max_tokens_default
                out.append((default, "stop") if used + default <= ctx else (ctx - used, "length"))
        return out

    def answer(self, plan: Plan) -> list[Choice]:
        """Every choice of the answer: the same request and seeds give the same choices."""
        choices = []
        request_seed = _NO_SEED if plan.seed is None else plan.seed
        for p, (prompt, (budget, finish)) in enumerate(zip(plan.prompts, self.budgets(plan))):
            prompt_seed = tokens.digest(prompt.text)
            adapter = self.adapters.get(plan.model) if self.adapters is not None else None
            for i in range(plan.n):
                seed = tokens.mix(prompt_seed, request_seed, self.options.seed, i)
                if adapter is not None:  # adapters: its own words for the same prompt
                    seed = tokens.mix(seed, adapter.digest)
                if plan.model.startswith(ECHO_PREFIX) and plan.tool is None and plan.json_format is None:
                    choice = _echo_choice(plan, prompt, p * plan.n + i, budget)
                else:
                    choice = self._choice(plan, p * plan.n + i, seed, budget, finish)
                if plan.echo:
                    choice.echo = prompt.text
                choices.append(choice)
        return choices

    def _choice(self, plan: Plan, index: int, seed: int, budget: int, finish: str) -> Choice:
        if plan.tool is not None:
            rng = tokens.word_rng(seed)
            arguments = dumps(structured.object_for(plan.tool.get("parameters") or {}, rng)).decode()
            call = ToolCall(id=f"chatcmpl-tool-{rng.getrandbits(128):032x}",
                            name=plan.tool["name"], arguments=arguments)
            pieces = tokens.split_text(arguments)
            if len(pieces) > budget:
                pieces = pieces[:budget]
                call.arguments = "".join(pieces)
                return Choice(index, pieces, "length", budget, call)
            return Choice(index, pieces, "tool_calls", len(pieces), call)
        if plan.json_format is not None:
            rng = tokens.word_rng(seed)
            if isinstance(plan.json_format, dict):
                value = structured.value_for(plan.json_format, rng)
            else:
                value = structured.json_object_for(rng)
            pieces = tokens.split_text(dumps(value).decode())
            if len(pieces) > budget:
                pieces, finish = pieces[:budget], "length"
            else:
                finish = "stop"
        else:
            adapter = self.adapters.get(plan.model) if self.adapters is not None else None
            prefix = adapter.answer_prefix if adapter is not None else self.options.answer_prefix  # adapters
            lead = tokens.split_text(prefix)[:budget] if prefix else []
            pieces = lead + tokens.generate(seed, budget - len(lead))
        spent = len(pieces)
        if plan.stop:
            stopped = _apply_stop(pieces, plan.stop)
            if stopped is not None:
                (pieces, spent), finish = stopped, "stop"
        return Choice(index, pieces, finish, spent)

    # --- playing it out in time -------------------------------------------

    @asynccontextmanager
    async def running(self, model: str, prompts: list[Prompt], new_tokens: int,
                      arrival: float) -> AsyncIterator[Run]:
        """Hold a batch slot for a request from its prefill to its last token.

        The request counts as aborted unless `Run.done` was called: a client
        that went away (cancellation, a reset connection) frees its slot too.
        """
        loop = asyncio.get_running_loop()
        await self.scheduler.acquire()
        prompt_tokens = sum(len(p.tokens) for p in prompts)
        blocks = -(-(prompt_tokens + new_tokens) // self.options.block_size)
        self.held_blocks += blocks
        run = Run(self, loop, arrival, prompt_tokens)
        try:
            run.look_up(model, prompts)
            yield run
        finally:
            self.held_blocks -= blocks
            self.scheduler.release()
            if not run.finished:
                self.metrics.finished("abort")


class Run:
    """One request holding a slot: when its tokens are due, and what it cost."""

    __slots__ = ("engine", "loop", "arrival", "started", "prompt_tokens", "cached_tokens",
                 "first_token_at", "first_token_sent", "finished", "_hashes")

    def __init__(self, engine: Engine, loop: asyncio.AbstractEventLoop, arrival: float,
                 prompt_tokens: int) -> None:
        self.engine = engine
        self.loop = loop
        self.arrival = arrival
        self.started = loop.time()
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        self.first_token_at = self.started
        self.first_token_sent = self.started
        self.finished = False
        self._hashes: list[list[int]] = []

    def look_up(self, model: str, prompts: list[Prompt]) -> None:
        engine = self.engine
        cache = engine.cache
        root = engine._roots.get(model) or tokens.digest(model)  # adapters: an adapter's own root
        cached = 0
        if cache.enabled:
            for prompt in prompts:
                hashes = cache.block_hashes(prompt.tokens, root)
                cached += cache.match(hashes, len(prompt.tokens))
                self._hashes.append(hashes)
        self.cached_tokens = cached
        metrics = engine.metrics
        metrics.prefix_queries.inc(self.prompt_tokens)
        if cached:
            metrics.prefix_hits.inc(cached)
        metrics.queue_time.observe(self.started - self.arrival)
        options = engine.options
        self.first_token_at = self.started + options.ttft + options.prefill_per_token * (
            self.prompt_tokens - cached)

    async def _until(self, when: float) -> None:
        delay = when - self.loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def first_token(self) -> None:
        """Wait out the prefill; the prompt's blocks are cached from then on."""
        await self._until(self.first_token_at)
        for hashes in self._hashes:
            self.engine.cache.insert(hashes)
        self.first_token_sent = now = self.loop.time()
        metrics = self.engine.metrics
        metrics.prompt_tokens.inc(self.prompt_tokens)
        metrics.ttft.observe(now - self.arrival)

    def is_due(self, k: int) -> bool:
        """Whether the k-th output token (0 is the first) is due already."""
        tpot = self.engine.options.tpot
        return not tpot or self.first_token_at + k * tpot <= self.loop.time()

    async def token(self, k: int) -> None:
        """Wait until the k-th output token (0 is the first) is due."""
        tpot = self.engine.options.tpot
        if k and tpot:
            await self._until(self.first_token_at + k * tpot)

    def done(self, completion_tokens: int, longest: int, finish_reason: str) -> None:
        """The request ended: `completion_tokens` over all choices, `longest` in
        the longest choice (the one the time per output token is read from)."""
        now = self.loop.time()
        metrics = self.engine.metrics
        if completion_tokens:
            metrics.generation_tokens.inc(completion_tokens)
        if longest > 1:
            metrics.tpot.observe((now - self.first_token_sent) / (longest - 1))
        metrics.e2e.observe(now - self.arrival)
        metrics.finished("stop" if finish_reason == "tool_calls" else finish_reason)
        self.finished = True


def request_id(prefix: str) -> str:
    return prefix + os.urandom(16).hex()
