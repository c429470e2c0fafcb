"""Reading each replica's engine load from its Prometheus /metrics.

Only the few series that say how busy an engine is are read, by name, from
the text: vLLM's `vllm:num_requests_running`, `vllm:num_requests_waiting`
and `vllm:kv_cache_usage_perc` (or the older `vllm:gpu_cache_usage_perc`),
and llama.cpp's `llamacpp:requests_processing`, `llamacpp:requests_deferred`
and `llamacpp:kv_cache_usage_ratio`. Series of the same name with different
labels are added up. An endpoint whose /metrics answers 4xx (a provider
has none) is asked no more.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

import aiohttp

from llmgw.obs import logs
from llmgw.router.replicas import EngineLoad, Replica, ReplicaSet
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.router.scrape")

_RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
_WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio")
_WANTED = {name: "running" for name in _RUNNING} | {name: "waiting" for name in _WAITING} | {
    name: "kv" for name in _KV
}
_PREFIXES = tuple(sorted({name.split(":", 1)[0] + ":" for name in _WANTED}))
#: Bytes read of one /metrics answer at most; engines publish a few hundred KiB at worst.
MAX_METRICS_BYTES = 4 * 1024 * 1024


def parse_load(text: str) -> EngineLoad | None:
    """The load in a Prometheus text exposition, or None when it has none of the series."""
    found = False
    running = waiting = 0.0
    kv: float | None = None
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        name_end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if 0 <= at < name_end:
                name_end = at
        kind = _WANTED.get(line[:name_end])
        if kind is None:
            continue
        parts = line.rsplit("}", 1)[-1].split() if "}" in line else line.split()[1:]
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isnan(value):  # the engine has no reading yet
            continue
        found = True
        if kind == "running":
            running += value
        elif kind == "waiting":
            waiting += value
        else:
            kv = value if kv is None else max(kv, value)
    if not found:
        return None
    return EngineLoad(running=running, waiting=waiting, kv_cache_usage=kv)


class Scraper:
    """Reads every replica's /metrics each `interval` seconds, in the background.

    `after_round` runs after each round (admission uses it to hand out room
    that replicas coming back from ejection have).
    """

    def __init__(self, replicas: ReplicaSet, session: aiohttp.ClientSession, interval: float,
                 *, after_round: Callable[[], None] | None = None) -> None:
        self.replicas = replicas
        self.session = session
        self.interval = interval
        self.after_round = after_round
        self._no_metrics: set[str] = set()  # replica ids whose engine answered 404
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="llmgw-replica-scraper")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.scrape_all()
            except Exception:  # one bad round must not stop the scraper
                log.exception("scrape round failed")
            if self.after_round is not None:
                self.after_round()
            await asyncio.sleep(max(0.05, self.interval - (time.monotonic() - started)))

    async def scrape_all(self) -> None:
        targets = [r for r in self.replicas if r.metrics_url and r.id not in self._no_metrics]
        if targets:
            await asyncio.gather(*(self.scrape(r) for r in targets))

    async def scrape(self, replica: Replica) -> None:
        timeout = aiohttp.ClientTimeout(total=max(0.5, min(self.interval, 5.0)))
        headers = {}
        if replica.api_key is not None:
            headers["Authorization"] = "Bearer " + replica.api_key.reveal()
        try:
            async with self.session.get(replica.metrics_url, timeout=timeout, headers=headers) as resp:
                if 400 <= resp.status < 500:  # none there (a provider), or not for us: stop asking
                    self._no_metrics.add(replica.id)
                    logs.event(log, "replica's /metrics not readable; its load is not scraped",
                               replica_id=replica.id, status=resp.status)
                    return
                if resp.status != 200:
                    return
                raw = await resp.content.read(MAX_METRICS_BYTES)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            logs.event(log, "scrape failed", logging.DEBUG, replica_id=replica.id, error=type(exc).__name__)
            return
        load = parse_load(raw.decode("utf-8", "replace"))
        if load is not None:
            load.at = time.monotonic()
            replica.load = load
