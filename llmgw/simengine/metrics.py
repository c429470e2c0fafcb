"""The engine's Prometheus metrics, under vLLM's names.

Each engine has its own registry, so several engines in one process (tests,
benchmarks) never mix their numbers. Every series is labelled with
model_name, the first served name, as vLLM labels its own.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# vLLM's buckets, so dashboards and alerts written for vLLM read the same.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
               50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# The names /metrics always shows (counters with their _total), for tests and docs.
METRIC_NAMES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)


class SimMetrics:
    """The engine's counters, gauges and histograms, bound to its model_name label."""

    def __init__(
        self,
        model_name: str,
        *,
        running: Callable[[], float],
        waiting: Callable[[], float],
        cache_usage: Callable[[], float],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        reg = self.registry
        label = ["model_name"]

        def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
            Gauge(name, doc, label, registry=reg).labels(model_name).set_function(read)

        gauge("vllm:num_requests_running", "Requests in the batch, prefilling or decoding.", running)
        gauge("vllm:num_requests_waiting", "Requests waiting for a batch slot.", waiting)
        gauge("vllm:gpu_cache_usage_perc", "KV cache usage, 1 is full (older name).", cache_usage)
        gauge("vllm:kv_cache_usage_perc", "KV cache usage, 1 is full.", cache_usage)

        def counter(name: str, doc: str):
            return Counter(name, doc, label, registry=reg).labels(model_name)

        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self._success = Counter(
            "vllm:request_success", "Requests finished, by why they finished.",
            ["model_name", "finished_reason"], registry=reg,
        )
        self._success_by_reason: dict[str, Counter] = {}
        for reason in ("stop", "length", "abort"):
            self._success_by_reason[reason] = self._success.labels(model_name, reason)

        def histogram(name: str, doc: str, buckets):
            return Histogram(name, doc, label, buckets=buckets, registry=reg).labels(model_name)

        self.ttft = histogram("vllm:time_to_first_token_seconds",
                              "Time from arrival to the first token.", TTFT_BUCKETS)
        self.tpot = histogram("vllm:time_per_output_token_seconds",
                              "Mean time between output tokens, one sample per request.", TPOT_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds",
                             "Time from arrival to the last token.", E2E_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds",
                                    "Time spent waiting for a batch slot.", E2E_BUCKETS)

    def finished(self, reason: str) -> None:
        child = self._success_by_reason.get(reason)
        if child is None:
            child = self._success_by_reason[reason] = self._success.labels(self.model_name, reason)
        child.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
