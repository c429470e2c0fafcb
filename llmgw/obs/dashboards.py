"""The Grafana dashboards llmgw ships, defined once: rows of panels, each with its queries and unit.

`grafana_json(dashboard)` makes the JSON Grafana imports; `llmgw ctl
dashboards export DIR` writes it, and tests/obs runs every query against a
real Prometheus that scraped `llmgw up`. Each dashboard asks for its
Prometheus data source (the `datasource` variable), so it imports into any
Grafana without editing.

A ratio whose numerator may have no series yet (no request has failed)
is written `(A or B * 0) / B`, so it reads 0 rather than "No data".
"""

from __future__ import annotations

import attrs

__all__ = ["Dashboard", "Panel", "Query", "Row", "DASHBOARDS", "grafana_json", "all_queries"]

#: Grafana's panel types used here
KINDS = ("timeseries", "stat", "table", "bargauge")


@attrs.frozen
class Query:
    expr: str
    legend: str = ""


@attrs.frozen
class Panel:
    title: str
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    #: Grafana's unit id: reqps, s, percentunit, percent, celsius, watt, bytes, short, …
    unit: str
    queries: tuple[Query, ...]
    description: str
    width: int = 12
    #: tables and bar gauges read the last value of each series, not a range
    instant: bool = False
    #: bar gauges and ratios: the scale's ends
    max: float | None = None


@attrs.frozen
class Row:
    title: str
    panels: tuple[Panel, ...]


@attrs.frozen
class Variable:
    name: str
    label: str
    query: str


@attrs.frozen
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = ()
    time_from: str = "now-6h"


def _ratio(part: str, whole: str) -> str:
    """`part / whole`, 0 where `whole` has series and `part` none."""
    return f"({part} or {whole} * 0) / {whole}"


def _p95(metric: str, by: str, selector: str = "", window: str = "5m") -> str:
    return f"histogram_quantile(0.95, sum by ({by}, le) (rate({metric}_bucket{selector}[{window}])))"


T = '{tenant=~"$tenant"}'


def _tenant(outcome: str = "") -> str:
    return f'{{tenant=~"$tenant",outcome="{outcome}"}}' if outcome else T


# ---------------------------------------------------------------------------------------------------- cluster

_REQUESTS = Row("Requests", (
    Panel("Requests a second, by model", "timeseries", "reqps",
          (Query("sum by (model) (rate(llmgw_requests_total[5m]))", "{{model}}"),),
          "Requests answered by the gateway, whatever their outcome, by the model that answered."),
    Panel("Failing, by model", "timeseries", "percentunit",
          (Query(_ratio('sum by (model) (rate(llmgw_requests_total{outcome="error"}[5m]))',
                        "sum by (model) (rate(llmgw_requests_total[5m]))"), "{{model}}"),),
          "The share of requests that ended in an error of an engine or the gateway (ModelFailing alerts "
          "past 5%). Refusals by a limit are not errors.", max=1),
    Panel("Refused, by outcome", "timeseries", "reqps",
          (Query('sum by (outcome) (rate(llmgw_requests_total{outcome!="ok"}[5m]))', "{{outcome}}"),),
          "Requests that did not get an answer: error, limited (a rate, token or budget limit, or a full "
          "queue), refused (key, model, capacity) and cancelled (the caller went away)."),
    Panel("Tokens a second, by model", "timeseries", "short",
          (Query("sum by (model, direction) (rate(llmgw_tokens_total[5m]))", "{{model}} {{direction}}"),),
          "Prompt tokens read and completion tokens written."),
    Panel("Time to first token, p95", "timeseries", "s",
          (Query(_p95("llmgw_ttft_seconds", "model"), "{{model}}"),),
          "From a streamed request's arrival to its first event (SlowFirstToken alerts past 10 s)."),
    Panel("Time per output token, p95", "timeseries", "s",
          (Query(_p95("llmgw_tpot_seconds", "model"), "{{model}}"),),
          "The mean time between tokens after the first, one sample a request."),
    Panel("Request duration, p95", "timeseries", "s",
          (Query(_p95("llmgw_request_duration_seconds", "model"), "{{model}}"),),
          "From a request's arrival to the end of its answer."),
    Panel("Output tokens a second per stream, median", "timeseries", "short",
          (Query("histogram_quantile(0.5, sum by (model, le) (rate(llmgw_output_tokens_per_second_bucket[5m])))",
                 "{{model}}"),),
          "How fast a streamed answer is written after its first token, as its reader sees it."),
))

_REPLICAS = Row("Replicas and queues", (
    Panel("Healthy replicas, by model", "timeseries", "short",
          (Query("sum by (model) (llmgw_replica_healthy)", "{{model}}"),),
          "Replicas taking requests; one failing requests is ejected for a while (NoHealthyReplica "
          "alerts when none is left)."),
    Panel("Requests at each replica", "timeseries", "short",
          (Query("sum by (model, replica) (llmgw_replica_in_flight)", "{{replica}}"),
           Query("sum by (model, replica) (llmgw_replica_engine_waiting)", "{{replica}} waiting in the engine")),
          "What this gateway has sent each replica and not had back, and what the engine says waits in it."),
    Panel("Waiting for room, by band", "timeseries", "short",
          (Query("sum by (model, band) (llmgw_queue_depth) or vector(0)", "{{model}} {{band}}"),),
          "Requests held by admission because every replica of their model is full (a model's queue is listed "
          "once something has waited in it)."),
    Panel("Wait for room, p95", "timeseries", "s",
          (Query(_p95("llmgw_queue_wait_seconds", "model, band"), "{{model}} {{band}}"),),
          "How long requests waited for a replica (QueueWaitLong alerts past 5 s)."),
    Panel("Retries and fallbacks a second", "timeseries", "reqps",
          (Query("sum(rate(llmgw_upstream_retries_total[5m])) or vector(0)", "sent again to another replica"),
           Query("sum(rate(llmgw_fallbacks_total[5m])) or vector(0)", "answered by a fallback model")),
          "Requests that failed on one replica and went to another, and requests a fallback model answered.",
          width=24),
))

_GUARD = Row("Guardrails", (
    Panel("Guard checks a second, by stage and action", "timeseries", "reqps",
          (Query("sum by (stage, action) (rate(llmgw_guard_checks_total[5m]))", "{{stage}} {{action}}"),),
          "Checks of requests (input) and answers (output) by the policies attached to their scope: allowed, "
          "flagged, redacted, blocked."),
    Panel("Guard check time, p95, by stage", "timeseries", "s",
          (Query(_p95("llmgw_guard_latency_seconds", "stage"), "{{stage}}"),),
          "What the checks add to a request, judges included."),
    Panel("Blocked, redacted and unjudged a second", "timeseries", "reqps",
          (Query("sum(rate(llmgw_tenant_guard_blocks_total[5m])) or vector(0)", "blocked"),
           Query("sum(rate(llmgw_guard_redactions_total[5m])) or vector(0)", "values redacted"),
           Query("sum(rate(llmgw_guard_fail_open_total[5m]))", "served unjudged (GuardFailingOpen)")),
          "Requests and answers blocked, values replaced by placeholders, and checks passed without their judge.",
          width=24),
))

_STORE = Row("Store and notifications", (
    Panel("Store query time, p95", "timeseries", "s",
          (Query("histogram_quantile(0.95, sum by (kind, le) "
                 "(rate(llmgw_store_query_duration_seconds_bucket[5m])))", "{{kind}}"),),
          "How long the store takes to read and write (StoreSlow past 0.5 s)."),
    Panel("Store query failures", "timeseries", "short",
          (Query("sum by (kind) (increase(llmgw_store_query_errors_total[10m])) or vector(0)", "{{kind}}"),),
          "Queries the store failed in ten minutes (StoreQueryErrors)."),
    Panel("Store write failures", "timeseries", "short",
          (Query("sum by (instance) (increase(llmgw_store_write_errors_total[5m]))", "{{instance}}"),),
          "Writes the store failed in five minutes: a full disk, a read-only file, an unreachable database "
          "(StoreWritesFailing)."),
    Panel("Usage rows waiting and lost", "timeseries", "short",
          (Query("sum by (instance) (llmgw_usage_journal_rows)", "{{instance}} in the journal"),
           Query("sum by (instance) (increase(llmgw_usage_rows_dropped_total[1h]))", "{{instance}} lost in 1h")),
          "Usage rows kept on disk until the store takes them, and rows neither took."),
    Panel("Notifications", "timeseries", "short",
          (Query("sum by (outcome) (increase(llmgw_notifications_total[1h])) or vector(0)", "{{outcome}}"),),
          "Events sent to notify.sinks in the last hour: sent, failed, dropped.", width=24),
))

_CONTROL = Row("Control plane", (
    Panel("Nodes, by state", "timeseries", "short",
          (Query("sum by (state) (llmgw_nodes)", "{{state}}"),),
          "Nodes the leader knows: ready, cordoned, draining, disconnected, lost (NodeLost)."),
    Panel("Replicas, by model and state", "timeseries", "short",
          (Query("sum by (model, state) (llmgw_replicas)", "{{model}} {{state}}"),),
          "Replicas the leader placed, starting, ready or stopping."),
    Panel("Placement", "timeseries", "short",
          (Query("sum by (model) (increase(llmgw_placements_total[15m]))", "{{model}} placed"),
           Query("sum by (model, reason) (increase(llmgw_placement_failures_total[15m])) or vector(0)",
                 "{{model}} no room: {{reason}}"),
           Query("sum by (model) (increase(llmgw_replica_start_failures_total[15m])) or vector(0)",
                 "{{model}} failed to start")),
          "Replicas placed, passes that found no room (PlacementFailing), and starts that failed, in 15 minutes."),
    Panel("Reconciler pass, p95", "timeseries", "s",
          (Query("histogram_quantile(0.95, sum by (instance, le) (rate(llmgw_reconcile_duration_seconds_bucket[5m])))",
                 "{{instance}}"),),
          "How long one pass comparing what models want with what runs takes (ReconcileSlow)."),
    Panel("Jobs, by kind and state", "timeseries", "short",
          (Query("sum by (kind, state) (llmgw_jobs)", "{{kind}} {{state}}"),),
          "Changes to models followed until they serve or fail (`llmgw ctl jobs`)."),
    Panel("Leader", "timeseries", "short",
          (Query("max by (instance) (llmgw_leader)", "{{instance}}"),),
          "1 on the control plane that leads, 0 on standbys (NoLeader)."),
    Panel("Lease renewals a minute", "timeseries", "short",
          (Query("sum by (instance) (rate(llmgw_lease_renewals_total[5m])) * 60", "{{instance}} renewed"),
           Query("sum by (instance) (rate(llmgw_lease_renewal_failures_total[5m])) * 60", "{{instance}} failed")),
          "The leader renews its lease every few seconds; failures lead to a take-over (LeaseRenewalsFailing)."),
))

_NODES = Row("Nodes", (
    Panel("CPU busy, by node", "timeseries", "percent",
          (Query("max by (node) (llmgw_node_cpu_utilization_percent)", "{{node}}"),),
          "The node's CPU use between two heartbeats."),
    Panel("Memory available, by node", "timeseries", "percentunit",
          (Query("max by (node) (llmgw_node_memory_available_bytes / llmgw_node_memory_total_bytes)", "{{node}}"),),
          "The share of memory the node has available (NodeMemoryLow below 5%).", max=1),
    Panel("Disk free, by node", "timeseries", "percentunit",
          (Query("max by (node, path) (llmgw_node_disk_free_bytes / llmgw_node_disk_total_bytes)",
                 "{{node}} {{path}}"),),
          "Free space on the disks the agent writes weights and engines to (NodeDiskFilling below 10%).", max=1),
    Panel("Engines, by node and state", "timeseries", "short",
          (Query("sum by (node, state) (llmgw_node_engines)", "{{node}} {{state}}"),
           Query("sum by (node) (increase(llmgw_node_engine_exits_total[15m]))", "{{node}} exits in 15m")),
          "Engines each node runs, and those that exited without being asked (EnginesExiting)."),
))

_GPUS = Row("GPUs", (
    Panel("GPU busy, by card", "timeseries", "percent",
          (Query("llmgw_gpu_utilization_percent", "{{node}} {{gpu}}"),),
          "The share of the last sample period a kernel ran on the card."),
    Panel("GPU memory in use, by card", "timeseries", "percentunit",
          (Query("llmgw_gpu_memory_used_bytes / llmgw_gpu_memory_total_bytes", "{{node}} {{gpu}}"),),
          "Memory in use over the card's memory; an engine takes most of it at start.", max=1),
    Panel("GPU temperature", "timeseries", "celsius",
          (Query("llmgw_gpu_temperature_celsius", "{{node}} {{gpu}}"),),
          "The cards' core temperature (GPUHot past 87 °C)."),
    Panel("GPU power against its limit", "timeseries", "percentunit",
          (Query("llmgw_gpu_power_watts / llmgw_gpu_power_limit_watts", "{{node}} {{gpu}}"),),
          "Power draw over the limit the driver enforces; at 1 the card is held at its power cap.", max=1),
    Panel("GPU clock", "timeseries", "rotmhz",
          (Query("llmgw_gpu_sm_clock_mhz", "{{node}} {{gpu}}"),),
          "The SM clock: it drops when the card is throttled."),
    Panel("What holds GPUs back", "timeseries", "short",
          (Query("sum by (reason) (llmgw_gpu_throttled)", "{{reason}}"),),
          "Cards whose clocks are held down now, by reason (GPUThermalThrottling for heat)."),
    Panel("GPU health", "timeseries", "short",
          (Query("sum by (health) (llmgw_gpu_health)", "{{health}}"),),
          "Cards by health: ok, degraded, failed (GPUFailed). Placement keeps replicas off what is not ok."),
    Panel("GPU errors", "timeseries", "short",
          (Query("sum by (node, gpu) (llmgw_gpu_ecc_errors)", "{{node}} {{gpu}} ECC"),
           Query("sum by (node, gpu) (llmgw_gpu_xid_errors)", "{{node}} {{gpu}} XID")),
          "Uncorrected ECC errors since the driver loaded, and XID codes of the last 15 minutes, by card."),
))

_MIRROR = Row("Mirror", (
    Panel("Model files sent", "timeseries", "Bps",
          (Query("sum by (instance) (rate(llmgw_mirror_bytes_served_total[5m]))", "{{instance}}"),),
          "Bytes a second the mirror sends to nodes fetching weights."),
    Panel("File requests, by status", "timeseries", "reqps",
          (Query("sum by (status) (rate(llmgw_mirror_file_requests_total[5m]))", "{{status}}"),),
          "Answers to nodes' file requests (MirrorServingErrors past 5% of 5xx)."),
    Panel("Fetches and verify failures", "timeseries", "short",
          (Query("sum by (result) (increase(llmgw_mirror_fetches_total[1h])) or vector(0)", "fetched: {{result}}"),
           Query("sum(increase(llmgw_mirror_verify_failures_total[1h]))", "files failing their checksum")),
          "Models fetched from their registry in the last hour, and files that failed verification.", width=24),
))

CLUSTER = Dashboard(
    uid="llmgw-cluster", title="llmgw — cluster",
    description="The gateway's requests, tokens and latency by model; replicas and queues; the control plane, "
                "the nodes and their GPUs; the guardrails; the store and the mirror.",
    rows=(_REQUESTS, _REPLICAS, _CONTROL, _NODES, _GPUS, _GUARD, _STORE, _MIRROR),
)

# ---------------------------------------------------------------------------------------------------- tenants

_TENANT_TOTALS = Row("The tenants chosen above", (
    Panel("Requests a second", "stat", "reqps",
          (Query(f"sum(rate(llmgw_tenant_requests_total{T}[5m]))"),), "Across the tenants chosen above.", width=6),
    Panel("Failing", "stat", "percentunit",
          (Query(_ratio(f'sum(rate(llmgw_tenant_requests_total{_tenant("error")}[5m]))',
                        f"sum(rate(llmgw_tenant_requests_total{T}[5m]))")),),
          "The share of their requests that ended in an error.", width=6, max=1),
    Panel("Refused by a limit", "stat", "percentunit",
          (Query(_ratio(f'sum(rate(llmgw_tenant_requests_total{_tenant("limited")}[5m]))',
                        f"sum(rate(llmgw_tenant_requests_total{T}[5m]))")),),
          "The share refused by a rate, token or budget limit.", width=6, max=1),
    Panel("First token, p95", "stat", "s",
          (Query(f"histogram_quantile(0.95, sum by (le) (rate(llmgw_tenant_ttft_seconds_bucket{T}[5m])))"),),
          "What their people wait for the first word of a streamed answer.", width=6),
))

_BY_TENANT = Row("By tenant", (
    Panel("Requests by tenant", "timeseries", "reqps",
          (Query(f"sum by (tenant) (rate(llmgw_tenant_requests_total{T}[5m]))", "{{tenant}}"),),
          "Requests a second, whatever their outcome."),
    Panel("Tokens by tenant", "timeseries", "short",
          (Query(f"sum by (tenant, direction) (rate(llmgw_tenant_tokens_total{T}[5m]))",
                 "{{tenant}} {{direction}}"),),
          "Prompt and completion tokens a second."),
    Panel("Refused by a limit, by tenant", "timeseries", "percentunit",
          (Query(_ratio(f'sum by (tenant) (rate(llmgw_tenant_requests_total{_tenant("limited")}[5m]))',
                        f"sum by (tenant) (rate(llmgw_tenant_requests_total{T}[5m]))"), "{{tenant}}"),),
          "TenantHittingLimits alerts past 10% for ten minutes.", max=1),
    Panel("Failing, by tenant", "timeseries", "percentunit",
          (Query(_ratio(f'sum by (tenant) (rate(llmgw_tenant_requests_total{_tenant("error")}[5m]))',
                        f"sum by (tenant) (rate(llmgw_tenant_requests_total{T}[5m]))"), "{{tenant}}"),),
          "TenantErrors alerts past 5% for ten minutes.", max=1),
    Panel("First token p95, by tenant", "timeseries", "s",
          (Query(_p95("llmgw_tenant_ttft_seconds", "tenant", T, "10m"), "{{tenant}}"),),
          "TenantSlowFirstToken alerts past 10 s.", width=24),
))

_USE = Row("Use and budgets", (
    Panel("Budgets spent this period", "bargauge", "percentunit",
          (Query("sort_desc(llmgw_budget_spent_ratio)", "{{scope}} {{name}} ({{period}})"),),
          "Each budget's spend this period over the budget, for the budgets requests were checked against "
          "(BudgetMostlySpent from 80%, BudgetSpent at all of it).", width=24, instant=True, max=1),
    Panel("Who used most, last 24 hours", "table", "short",
          (Query(f"sort_desc(sum by (tenant) (increase(llmgw_tenant_requests_total{T}[24h])))", "requests"),
           Query(f"sum by (tenant) (increase(llmgw_tenant_tokens_total{T}[24h]))", "tokens"),
           Query(_ratio(f'sum by (tenant) (increase(llmgw_tenant_requests_total{_tenant("limited")}[24h]))',
                        f"sum by (tenant) (increase(llmgw_tenant_requests_total{T}[24h]))"),
                 "share refused by a limit")),
          "Requests, tokens and the share refused by a limit over the last day, by tenant.",
          width=24, instant=True),
))

TENANTS = Dashboard(
    uid="llmgw-tenants", title="llmgw — tenants",
    description="Requests, tokens, failures, refusals by a limit and first-token time per tenant: the project "
                "of the key (none for a personal key, anonymous when keys are off).",
    rows=(_TENANT_TOTALS, _BY_TENANT, _USE),
    variables=(Variable("tenant", "Tenant", "label_values(llmgw_tenant_requests_total, tenant)"),),
    time_from="now-24h",
)

DASHBOARDS: tuple[Dashboard, ...] = (CLUSTER, TENANTS)


def all_queries(dashboard: Dashboard) -> list[tuple[str, Query]]:
    """Each query with the title of its panel."""
    return [(p.title, q) for row in dashboard.rows for p in row.panels for q in p.queries]


# ---------------------------------------------------------------------------------------------------- Grafana JSON

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel_json(panel: Panel, pid: int, x: int, y: int, height: int) -> dict:
    targets = []
    for i, q in enumerate(panel.queries):
        target = {"refId": chr(ord("A") + i), "expr": q.expr, "datasource": _DATASOURCE}
        if q.legend:
            target["legendFormat"] = q.legend
        if panel.instant:
            target.update(instant=True, range=False)
            if panel.kind == "table":
                target["format"] = "table"
        targets.append(target)
    defaults: dict = {"unit": panel.unit}
    if panel.max is not None:
        defaults.update(min=0, max=panel.max)
    out = {
        "id": pid, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": _DATASOURCE, "gridPos": {"x": x, "y": y, "w": panel.width, "h": height},
        "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"tooltip": {"mode": "multi"}} if panel.kind == "timeseries" else {},
    }
    if panel.kind == "table":
        names = {f"Value #{t['refId']}": q.legend for t, q in zip(targets, panel.queries)}
        out["transformations"] = [{"id": "merge", "options": {}},
                                  {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                                 "renameByName": names}}]
    return out


def grafana_json(d: Dashboard) -> dict:
    """The dashboard as Grafana's JSON model: rows laid out on its 24-column grid."""
    panels: list[dict] = []
    pid, y = 1, 0
    for row in d.rows:
        panels.append({"id": pid, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid, y, x, line = pid + 1, y + 1, 0, 0
        for panel in row.panels:
            height = 4 if panel.kind == "stat" else 8
            if x + panel.width > 24:
                x, y, line = 0, y + line, 0
            panels.append(_panel_json(panel, pid, x, y, height))
            pid, x, line = pid + 1, x + panel.width, max(line, height)
        y += line
    variables: list[dict] = [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                              "query": "prometheus", "current": {}, "hide": 0}]
    for v in d.variables:
        variables.append({
            "name": v.name, "label": v.label, "type": "query", "datasource": _DATASOURCE,
            "query": {"query": v.query, "refId": v.name}, "definition": v.query,
            "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "refresh": 2, "sort": 1,
        })
    return {
        "uid": d.uid, "title": d.title, "description": d.description, "tags": ["llmgw"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "1m",
        "time": {"from": d.time_from, "to": "now"},
        "templating": {"list": variables}, "panels": panels,
    }
