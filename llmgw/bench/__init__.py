"""`llmgw bench`: measure llmgw against what a user would use instead.

- `gateway` (llmgw.bench.gateway): requests/s and added latency through
  `llmgw server`, beside the engine alone and, when installed, LiteLLM.
- `routing` (llmgw.bench.routing): prefix-cache hits, time to first token
  and throughput under llmgw's replica choice and under baselines.
- `placement` (llmgw.bench.placement): time per placement decision and
  packing on synthetic clusters, beside a naive first fit.
- `guard` (llmgw.bench.guard): the guard detectors' precision and recall.

docs/performance.md says how to run them and what they measured.
"""
