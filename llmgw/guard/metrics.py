"""The guardrails' Prometheus series, registered in the gateway's own registry.

- `llmgw_guard_checks_total{stage,policy,action,category,mode}`: one per
  stage checked; action `allowed` when nothing was found, else `flagged`,
  `redacted`, `blocked` or `shadow-…`;
- `llmgw_guard_latency_seconds{stage}`: time the checks of a stage took,
  judges included;
- `llmgw_guard_judge_latency_seconds{judge_model}`: one judge's answer;
- `llmgw_guard_judge_errors_total{reason}`: `no_judge` (not in the catalog
  as a judge), `unavailable` (no replica answering), `timeout`, `format`
  (an answer its format cannot read), `error`;
- `llmgw_guard_fail_open_total`: checks served unjudged under `fail: open`;
- `llmgw_guard_stream_stops_total`: streams stopped with `content_filter`;
- `llmgw_guard_redactions_total{kind}`: values replaced by placeholders;
- `llmgw_tenant_guard_blocks_total{tenant}`: requests and answers blocked.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["GuardMetrics"]

CHECK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
JUDGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30)


class GuardMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.registry = reg
        self.checks = Counter("llmgw_guard_checks", "Guard checks, by stage, policies, action, category and mode.",
                              ["stage", "policy", "action", "category", "mode"], registry=reg)
        self.latency = Histogram("llmgw_guard_latency_seconds", "Time one stage's checks took, judges included.",
                                 ["stage"], buckets=CHECK_BUCKETS, registry=reg)
        self.judge_latency = Histogram("llmgw_guard_judge_latency_seconds", "Time a judge model took to answer.",
                                       ["judge_model"], buckets=JUDGE_BUCKETS, registry=reg)
        self.judge_errors = Counter("llmgw_guard_judge_errors", "Judges that gave no verdict, and why.",
                                    ["reason"], registry=reg)
        self.fail_open = Counter("llmgw_guard_fail_open", "Checks served unjudged because no judge answered.",
                                 registry=reg)
        self.stream_stops = Counter("llmgw_guard_stream_stops", "Streamed answers stopped with content_filter.",
                                    registry=reg)
        self.redactions = Counter("llmgw_guard_redactions", "Values replaced by placeholders, by kind.",
                                  ["kind"], registry=reg)
        self.tenant_blocks = Counter("llmgw_tenant_guard_blocks", "Requests and answers blocked, by tenant.",
                                     ["tenant"], registry=reg)

    def checked(self, stage: str, policy: str, action: str, category: str, mode: str, seconds: float) -> None:
        self.checks.labels(stage, policy, action or "allowed", category, mode).inc()
        self.latency.labels(stage).observe(seconds)
