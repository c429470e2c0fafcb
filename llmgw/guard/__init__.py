"""Guardrails: checking the text that goes to a model and the text that comes back.

- `normalize`, `redact`: the disguise remover and consistent placeholders (the detectors' groundwork);
- `policy`: what a policy says, how several narrow, which apply to a request (`PolicyBook`);
- `scan`: detectors run once per text, findings turned into actions, `GuardRecord`;
- `shapes`, `schema`: where text is in a body, what a policy changes, tool calls and structure checked;
- `gateway`: `GuardLayer` and the per-request `GuardRequest` the router calls;
- `stream`: a streamed answer released a sentence at a time, once checked;
- `judge`: judge models asked in turn within a budget, with a verdict cache;
- `attach`: attachments and the on/off switch, as store settings;
- `metrics`, `wiring`: the `llmgw_guard_*` series, and the layer put into a gateway.

docs/guardrails.md is the operator's page.
"""
