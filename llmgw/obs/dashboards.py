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
          "From a request's arrival to the end of its answer.", width=24),
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
          (Query("sum by (model, band) (llmgw_queue_depth)", "{{model}} {{band}}"),),
          "Requests held by admission because every replica of their model is full."),
    Panel("Wait for room, p95", "timeseries", "s",
          (Query(_p95("llmgw_queue_wait_seconds", "model, band"), "{{model}} {{band}}"),),
          "How long requests waited for a replica (QueueWaitLong alerts past 5 s)."),
    Panel("Retries and fallbacks a second", "timeseries", "reqps",
          (Query("sum(rate(llmgw_upstream_retries_total[5m])) or vector(0)", "sent again to another replica"),
           Query("sum(rate(llmgw_fallbacks_total[5m])) or vector(0)", "answered by a fallback model")),
          "Requests that failed on one replica and went to another, and requests a fallback model answered.",
          width=24),
))

_STORE = Row("Store and notifications", (
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

CLUSTER = Dashboard(
    uid="llmgw-cluster", title="llmgw — cluster",
    description="The gateway's requests, tokens and latency by model; replicas and queues; the store.",
    rows=(_REQUESTS, _REPLICAS, _STORE),
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

_USE = Row("Use", (
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
    description="Requests, tokens, failures, refusals by a limit and first-token time per tenant (the project "
                "of the key, or the level router.tenant_label names).",
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
            target.update(instant=True, range=False, format="table")
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
