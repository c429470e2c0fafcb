"""The Python load client: closed loop (a fixed number of workers) and open loop (a fixed rate).

It measures what wrk cannot: time to the first event of a stream and the
gaps between events, and requests sent at a fixed rate whatever the target
does. It runs on this process's event loop, so it costs CPU that wrk would
not; `Outcome.client_cpu` says how much, and a client near one full core is
itself the limit.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping

import aiohttp
import attrs

from llmgw.bench.stats import Outcome

#: Longest a single request may take before it counts as an error.
REQUEST_TIMEOUT = 120.0


@attrs.frozen
class Call:
    """One request to send: where, what, and whether its answer streams."""

    url: str
    body: bytes
    headers: Mapping[str, str] = attrs.field(factory=dict)
    stream: bool = False


@attrs.define
class Answer:
    """What a request brought back, when its caller wants more than the timings."""

    text: str = ""
    completion_tokens: int = 0
    cached_tokens: int = 0


def session_for(connections: int) -> aiohttp.ClientSession:
    """A client with keep-alive connections; `connections` 0 is no limit (open loop)."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections, ttl_dns_cache=None)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT))


def repeat(call: Call, count: int | None) -> Callable[[], Call | None]:
    """The same call `count` times (None: for ever, until a deadline stops the loop)."""
    left = [count]

    def next_call() -> Call | None:
        if left[0] is None:
            return call
        if left[0] <= 0:
            return None
        left[0] -= 1
        return call

    return next_call


async def send(session: aiohttp.ClientSession, call: Call, out: Outcome, *,
               parse: bool = False, keep_text: bool = False) -> Answer | None:
    """Send one request and record it in `out`. With `parse`, the answer's token counts are
    read (and counted in `out.tokens`); with `keep_text` too, its text."""
    started = time.perf_counter()
    answer = Answer() if parse else None
    gaps: list[tuple[float, float]] = []
    first = None
    try:
        async with session.post(call.url, data=call.body, headers=call.headers) as resp:
            if resp.status != 200:
                await resp.read()
                out.fail(f"HTTP {resp.status}")
                return None
            if not call.stream:
                body = await resp.read()
                if answer is not None:
                    _read_whole(json.loads(body), answer)
                elif b'"choices"' not in body:
                    out.fail("answer without choices")
                    return None
            else:
                last = done = None
                async for line in resp.content:
                    if not line.startswith(b"data:"):
                        continue
                    now = time.perf_counter()
                    if line.startswith(b"data: [DONE]"):
                        done = True  # read on to the end, so the connection is kept for the next request
                        continue
                    if first is None:
                        first = now
                    else:
                        gaps.append((now - last, 1.0))
                    last = now
                    # Decoding every chunk would make the client the bottleneck: only what is asked for.
                    if answer is not None and (keep_text or b'"usage":{' in line):
                        _read_chunk(json.loads(line[5:]), answer)
                if not done or first is None:
                    out.fail("stream ended early")
                    return None
    except TimeoutError:
        out.fail("timeout")
        return None
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: an answer that is not JSON
        out.fail(type(exc).__name__)
        return None
    done_at = time.perf_counter()
    out.ok += 1
    out.latencies.append((done_at - started, 1.0))
    if first is not None:
        out.ttfts.append((first - started, 1.0))
        out.gaps += gaps
    if answer is not None:
        out.tokens += answer.completion_tokens
    return answer


def _read_whole(body: dict, answer: Answer) -> None:
    choices = body.get("choices") or [{}]
    answer.text = (choices[0].get("message") or {}).get("content") or ""
    _read_usage(body.get("usage"), answer)


def _read_chunk(chunk: dict, answer: Answer) -> None:
    for choice in chunk.get("choices") or ():
        piece = (choice.get("delta") or {}).get("content")
        if piece:
            answer.text += piece
    _read_usage(chunk.get("usage"), answer)


def _read_usage(usage: dict | None, answer: Answer) -> None:
    if usage:
        answer.completion_tokens = int(usage.get("completion_tokens") or 0)
        answer.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


async def closed_loop(session: aiohttp.ClientSession, calls: Callable[[], Call | None], concurrency: int, *,
                      duration: float | None = None, parse: bool = False) -> Outcome:
    """`concurrency` workers, each sending its next request when its last is answered,
    until `calls` runs out or `duration` seconds have passed."""
    out = Outcome()
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + duration if duration else None

    async def worker() -> None:
        while deadline is None or time.perf_counter() < deadline:
            call = calls()
            if call is None:
                return
            await send(session, call, out, parse=parse)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.elapsed = time.perf_counter() - t0
    out.client_cpu = time.process_time() - cpu0
    return out


async def open_loop(session: aiohttp.ClientSession, calls: Callable[[], Call | None], rate: float, *,
                    duration: float | None = None, parse: bool = False) -> Outcome:
    """Requests sent at `rate` a second whether or not earlier ones were answered, until
    `calls` runs out or `duration` seconds of sending have passed; then the rest are awaited.

    Latency counts from when a request actually left; `Outcome.late` says how far behind
    its schedule the client fell at worst (a client that falls behind offers less than `rate`).
    """
    out = Outcome()
    cpu0, t0 = time.process_time(), time.perf_counter()
    tasks: set[asyncio.Task] = set()
    sent = 0
    while True:
        due = t0 + sent / rate
        if duration and due >= t0 + duration:
            break
        call = calls()
        if call is None:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            out.late = max(out.late, -delay)
        task = asyncio.create_task(send(session, call, out, parse=parse))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    if tasks:
        await asyncio.gather(*tasks)
    out.elapsed = time.perf_counter() - t0
    out.client_cpu = time.process_time() - cpu0
    return out
