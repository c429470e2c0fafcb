"""The alert rules llmgw ships: one definition, rendered as a Prometheus rules file and as docs.

Each alert says, in its `description`, what the operator should do about it.
`llmgw ctl alerts export` prints the file, `llmgw server init` writes it
beside server.yaml, and docs/monitoring.md's Alerts section is made from the
same list. tests/obs/alerts_test.yml is the promtool unit test: for every
alert, one case that fires it and one that does not.

Severities: `critical` wakes someone (requests fail, data is lost, a card
computes on bad memory); `warning` is for working hours; `info` is worth
knowing, and nothing is broken.
"""

from __future__ import annotations

import attrs

__all__ = ["Alert", "AlertGroup", "GROUPS", "SEVERITIES", "all_alerts", "rules_document"]

SEVERITIES = ("critical", "warning", "info")


@attrs.frozen
class Alert:
    name: str
    expr: str
    severity: str = attrs.field(validator=attrs.validators.in_(SEVERITIES))
    #: how long the expression must hold before the alert fires ("0m": at once)
    wait: str
    #: one line, with the labels that say where ({{ $labels.x }}) and the value
    summary: str
    #: what it means and what to do
    description: str


@attrs.frozen
class AlertGroup:
    name: str
    #: one sentence for the docs: what the group watches
    about: str
    alerts: tuple[Alert, ...]


def _join(*lines: str) -> str:
    return " ".join(lines)


AVAILABILITY = AlertGroup("llmgw-availability", "Whether Prometheus reaches each llmgw endpoint it scrapes.", (
    Alert(
        "LlmgwEndpointDown", 'up{job=~"llmgw.*"} == 0', "critical", "3m",
        "{{ $labels.job }} at {{ $labels.instance }} has not answered a scrape for three minutes",
        _join("The process is stopped, its machine is down, or a firewall closes the port. On that machine,",
              "`systemctl status llmgw-server` (or llmgw-agent, llmgw-mirror) and `llmgw doctor` say which;",
              "the role's log says why it stopped. The alert needs the scrape jobs named llmgw-…, as in the",
              "example configuration in docs/monitoring.md."),
    ),
))

GATEWAY = AlertGroup("llmgw-gateway", "What the callers of the client API feel: failures, waits, replicas ejected.", (
    Alert(
        "ModelFailing",
        _join('sum by (model) (rate(llmgw_requests_total{outcome="error"}[10m]))',
              "/ sum by (model) (rate(llmgw_requests_total[10m])) > 0.05",
              "and sum by (model) (rate(llmgw_requests_total[10m])) > 0.05"),
        "critical", "10m",
        "{{ $value | humanizePercentage }} of the requests for {{ $labels.model }} fail",
        _join("For ten minutes more than one request in twenty to the model has ended in an error (refusals by",
              "a limit are not counted). `llmgw ctl replicas` shows whether its replicas are ready; the agent",
              "log of their node (`llmgw ctl node logs NODE`) says why an engine fails. If one tenant alone",
              "fails (TenantErrors), look at what it sends instead."),
    ),
    Alert(
        "NoHealthyReplica", "max by (model) (llmgw_replica_healthy) == 0", "critical", "2m",
        "Every replica of {{ $labels.model }} is ejected after failures",
        _join("The gateway stopped sending to each of the model's replicas after they failed requests, so",
              "its requests fail or go to a fallback. `llmgw ctl replicas` lists them;",
              "`llmgw ctl replica restart ID` starts one again, and the node's agent log says why it failed."),
    ),
    Alert(
        "SlowFirstToken",
        _join("histogram_quantile(0.95, sum by (model, le) (rate(llmgw_ttft_seconds_bucket[15m]))) > 10",
              "and sum by (model) (rate(llmgw_ttft_seconds_count[15m])) > 0.02"),
        "warning", "15m",
        "{{ $labels.model }} takes {{ $value | humanizeDuration }} to its first token at p95",
        _join("Callers of streamed answers wait this long before anything appears. Usually the replicas are",
              "full (QueueWaitLong, PoolSaturated) and more of them help (`llmgw ctl model scale`); a long",
              "wait with idle replicas is the engine itself, its log says why."),
    ),
    Alert(
        "QueueWaitLong",
        "histogram_quantile(0.95, sum by (model, le) (rate(llmgw_queue_wait_seconds_bucket[10m]))) > 5",
        "warning", "10m",
        "Requests for {{ $labels.model }} wait {{ $value | humanizeDuration }} for room at p95",
        _join("Every replica of the model is at its batch limit and admission holds requests in its queue.",
              "Give it more replicas (`llmgw ctl model scale`), or move traffic of the lower bands elsewhere;",
              "requests that wait past their band's limit are refused with 503."),
    ),
    Alert(
        "PoolSaturated", "llmgw_pool_saturation > 1", "warning", "15m",
        "{{ $labels.model }}'s replicas have {{ $value | humanize }} times the requests they take at once",
        _join("Requests at the model's replicas and waiting for them are more than the replicas take at once,",
              "so some queue (QueueWaitLong says how long). More replicas (`llmgw ctl model scale`) or a",
              "higher concurrency where the engine has room; `llmgw ctl explain-placement` says whether the",
              "cluster has room for another."),
    ),
    Alert(
        "GatewayFaults", "sum by (route) (increase(llmgw_http_errors_total[10m])) > 0", "warning", "0m",
        "The gateway failed {{ $value | humanize }} requests on {{ $labels.route }} with its own fault",
        _join("A status 500 is a fault of llmgw, not of the caller or the engine. Each one is logged with its",
              "request id and the error: search the server's log for the route, and report it with that line."),
    ),
    Alert(
        "FallbacksServing", "sum by (model, served, reason) (rate(llmgw_fallbacks_total[15m])) > 0", "info", "15m",
        "Requests for {{ $labels.model }} are answered by {{ $labels.served }} ({{ $labels.reason }})",
        _join("For fifteen minutes callers asking for the model get its fallback instead. Working as",
              "configured, but they are getting a different model: find out why the first one cannot answer",
              "(its replicas, its limits) if it lasts."),
    ),
    Alert(
        "ModelUpdateAvailable", "llmgw_model_update_available == 1", "info", "1h",
        "The repository {{ $labels.model }} was served from has new files",
        _join("The registry repository published different files under the names being served. `llmgw ctl",
              "model updates` lists what changed; nothing moves until you change the model's source."),
    ),
))

ACCOUNTING = AlertGroup("llmgw-accounting", "Whether usage, changes and notifications reach where they go.", (
    Alert(
        "StoreWritesFailing", "increase(llmgw_store_write_errors_total[5m]) > 0", "critical", "0m",
        "The store failed {{ $value | humanize }} writes in five minutes on {{ $labels.instance }}",
        _join("A full disk, a read-only file or an unreachable database. Admin changes are refused while it",
              "lasts and usage rows wait in the journal. `llmgw doctor` on the control plane checks the",
              "store; free the disk or bring the database back, and the journal is written out by itself."),
    ),
    Alert(
        "UsageRowsDropped", "increase(llmgw_usage_rows_dropped_total[10m]) > 0", "critical", "0m",
        "{{ $value | humanize }} usage rows were lost on {{ $labels.instance }}",
        _join("Neither the store nor the journal took them: the requests were served and will not be billed",
              "or counted against budgets. Fix the store (StoreWritesFailing) and the disk the journal is on."),
    ),
    Alert(
        "UsageJournalBacklog", "llmgw_usage_journal_rows > 0", "warning", "10m",
        "{{ $value }} usage rows wait in the journal on {{ $labels.instance }}",
        _join("The store has not taken usage rows for ten minutes; they are kept on disk and written once it",
              "does. Usage reports and budgets lag until then. StoreWritesFailing usually says why."),
    ),
    Alert(
        "NotificationsFailing",
        'sum by (sink, event) (increase(llmgw_notifications_total{outcome=~"failed|dropped"}[15m])) > 0',
        "warning", "0m",
        "Notifications of {{ $labels.event }} to {{ $labels.sink }} are not delivered",
        _join("The sink refused them, did not answer, or the queue was full. `llmgw ctl notify test` sends",
              "one now and prints the answer; check the sink's URL and secret in server.yaml's notify.sinks."),
    ),
))

TENANTS = AlertGroup(
    "llmgw-tenants", "Per tenant (the project of the key: none for a personal key, anonymous without keys), "
    "and per budget.", (
    Alert(
        "BudgetMostlySpent", "llmgw_budget_spent_ratio >= 0.8 and llmgw_budget_spent_ratio < 1", "warning", "5m",
        "{{ $labels.scope }} {{ $labels.name }} has spent {{ $value | humanizePercentage }} of its budget for the "
        "{{ $labels.period }}",
        _join("Its requests are refused once all of it is spent, until the period turns. Raise the budget",
              "(`llmgw ctl limits set SCOPE --budget-micros N`), or tell its people now rather than when they",
              "are refused."),
    ),
    Alert(
        "BudgetSpent", "llmgw_budget_spent_ratio >= 1", "critical", "1m",
        "{{ $labels.scope }} {{ $labels.name }} has spent its budget for the {{ $labels.period }}",
        _join("Requests under it are refused with 429 (budget_exceeded) until the period turns, but for",
              "models with a fallback that still fits. Raise the budget with `llmgw ctl limits set` if the",
              "spending is wanted; otherwise `llmgw ctl usage` says who spent it."),
    ),
    Alert(
        "TenantHittingLimits",
        _join('sum by (tenant) (rate(llmgw_tenant_requests_total{outcome="limited"}[10m]))',
              "/ sum by (tenant) (rate(llmgw_tenant_requests_total[10m])) > 0.1"),
        "warning", "10m",
        "{{ $value | humanizePercentage }} of {{ $labels.tenant }}'s requests are refused by a limit",
        _join("A rate, token or budget limit turns their traffic away. Either the limit is too low for what",
              "they now do (`llmgw ctl limits` shows and sets it), or a client of theirs is looping."),
    ),
    Alert(
        "TenantErrors",
        _join('sum by (tenant) (rate(llmgw_tenant_requests_total{outcome="error"}[10m]))',
              "/ sum by (tenant) (rate(llmgw_tenant_requests_total[10m])) > 0.05",
              "and sum by (tenant) (rate(llmgw_tenant_requests_total[10m])) > 0.05"),
        "warning", "10m",
        "{{ $value | humanizePercentage }} of {{ $labels.tenant }}'s requests fail",
        _join("Refusals by a limit are not counted. If every tenant fails alike it is a model (ModelFailing);",
              "one tenant alone is usually what it sends: prompts past the context, a model it may not use."),
    ),
    Alert(
        "TenantTrafficSpike",
        _join("sum by (tenant) (rate(llmgw_tenant_requests_total[30m]))",
              "> 3 * sum by (tenant) (rate(llmgw_tenant_requests_total[7d]))",
              "and sum by (tenant) (rate(llmgw_tenant_requests_total[30m])) > 0.2"),
        "info", "15m",
        "{{ $labels.tenant }} sends three times its weekly average",
        _join("A new workload, a batch job, or a client retrying in a loop. Only for tenants sending more than",
              "one request every five seconds, so a quiet team starting its day pages nobody."),
    ),
    Alert(
        "TenantSlowFirstToken",
        _join("histogram_quantile(0.95, sum by (tenant, le) (rate(llmgw_tenant_ttft_seconds_bucket[15m]))) > 10",
              "and sum by (tenant) (rate(llmgw_tenant_ttft_seconds_count[15m])) > 0.02"),
        "warning", "15m",
        "{{ $labels.tenant }} waits {{ $value | humanizeDuration }} for a first token at p95",
        _join("What their people feel. If SlowFirstToken fires for the models too, it is the cluster; if only",
              "this tenant is slow, it is the models it uses or its admission band."),
    ),
))

GUARD = AlertGroup("llmgw-guard", "The guardrails and their judge models.", (
    Alert(
        "GuardFailingOpen",
        _join("sum(rate(llmgw_guard_fail_open_total[5m]))",
              "/ clamp_min(sum(rate(llmgw_guard_checks_total[5m])), 1e-9) > 0.01"),
        "warning", "5m",
        "{{ $value | humanizePercentage }} of judged traffic is served unjudged",
        _join("A policy's judge model does not answer within its latency budget and the policy fails open:",
              "requests pass unjudged. GuardJudgeUnavailable or GuardJudgeSlow says why; `llmgw ctl",
              "replicas` whether the judge has replicas."),
    ),
    Alert(
        "GuardJudgeSlow",
        _join("histogram_quantile(0.95, sum by (judge_model, le)",
              "(rate(llmgw_guard_judge_latency_seconds_bucket[5m]))) > 0.25"),
        "warning", "10m",
        "Judge {{ $labels.judge_model }} answers in {{ $value | humanizeDuration }} at p95",
        _join("Every judged request waits this long, and those past their policy's budget are served",
              "unjudged or refused. Give the judge more replicas, or faster ones (`llmgw ctl model scale`)."),
    ),
    Alert(
        "GuardJudgeUnavailable", 'sum by (reason) (rate(llmgw_guard_judge_errors_total{reason!="timeout"}[5m])) > 0',
        "critical", "5m",
        "The guardrails cannot ask their judge ({{ $labels.reason }})",
        _join("no_judge: a policy names a model the catalog does not have as a judge. unavailable: the judge",
              "has no replica answering (`llmgw ctl replicas`). format: it answers in a form its judge",
              "format does not read. `llmgw ctl guard judge status` says what is wrong with each judge."),
    ),
    Alert(
        "GuardBlocksSpiking",
        _join("sum by (tenant) (rate(llmgw_tenant_guard_blocks_total[1h]))",
              "> 3 * sum by (tenant) (rate(llmgw_tenant_guard_blocks_total[7d]))",
              "and sum by (tenant) (increase(llmgw_tenant_guard_blocks_total[1h])) > 10"),
        "warning", "15m",
        "{{ $labels.tenant }} is blocked three times as often as usual",
        _join("More than ten blocks in an hour and three times the tenant's weekly rate: someone probing, a",
              "client sending data it should not, or a policy that changed. The usage rows carry the guard's",
              "category by request."),
    ),
    Alert(
        "GuardSecretInAnswer",
        'sum(increase(llmgw_guard_checks_total{stage="output",category="secret",action!="allowed"}[5m])) > 0',
        "critical", "0m",
        "A model put something shaped like a credential in an answer",
        _join("It was stopped or rewritten where the policy enforces; either way the model saw it, in its",
              "prompt or its training. The usage rows with guard category secret say which request; rotate",
              "the credential if it is a real one."),
    ),
))

CONTROL = AlertGroup("llmgw-control", "The control plane: leadership, nodes, placement and replicas starting.", (
    Alert(
        "NoLeader", "max(llmgw_leader) == 0", "critical", "1m",
        "No control plane leads the cluster",
        _join("Nothing schedules: replicas that stop are not replaced, nodes are not taken in, models added",
              "are not placed. Clients are still served by what runs. Leadership is a lease in the store: a",
              "store that does not answer (StoreWritesFailing) is the usual cause; the control planes' logs",
              "say why their renewals fail."),
    ),
    Alert(
        "LeaseRenewalsFailing", "increase(llmgw_lease_renewal_failures_total[5m]) > 2", "warning", "0m",
        "{{ $labels.instance }} failed {{ $value | humanize }} leadership lease renewals in five minutes",
        _join("A leader that cannot renew its lease gives leadership up when it lapses, and a standby takes",
              "over. Check the store from that control plane (`llmgw doctor`) and its clock."),
    ),
    Alert(
        "NodeLost", 'llmgw_nodes{state="lost"} > 0', "warning", "1m",
        "{{ $value }} node(s) are lost",
        _join("The leader has not heard from their agents past the heartbeat window; their replicas are",
              "placed elsewhere where there is room. `llmgw ctl nodes` names them; on the machine,",
              "`systemctl status llmgw-agent` and `llmgw doctor`. A node that is gone for good:",
              "`llmgw ctl node remove NODE`."),
    ),
    Alert(
        "ModelParked", "llmgw_model_parked == 1", "critical", "0m",
        "{{ $labels.model }} is parked after failing to start again and again",
        _join("The control plane stopped trying to place it, so it is not served. `llmgw ctl",
              "explain-placement {{ $labels.model }}` says what failed and `llmgw ctl node logs NODE` shows",
              "the engine's output; once fixed, `llmgw ctl model retry {{ $labels.model }}` starts it again."),
    ),
    Alert(
        "PlacementFailing", "sum by (model, reason) (increase(llmgw_placement_failures_total[15m])) > 0",
        "warning", "15m",
        "{{ $labels.model }} wants a replica that finds no room ({{ $labels.reason }})",
        _join("For fifteen minutes placement found no node for a replica the model wants. no_nodes: no node is",
              "ready; quota: a capacity quota is full (`llmgw ctl quotas`); fabric or no_fit: no node or",
              "fabric has the room. `llmgw ctl explain-placement {{ $labels.model }}` says node by node why."),
    ),
    Alert(
        "ReplicaStartsFailing", "sum by (model) (increase(llmgw_replica_start_failures_total[30m])) > 3",
        "warning", "0m",
        "{{ $labels.model }} failed to start {{ $value | humanize }} replicas in half an hour",
        _join("Its engine exits or never becomes ready. `llmgw ctl node logs NODE` prints the engine's log on",
              "the node; a model failing every start is parked (ModelParked)."),
    ),
    Alert(
        "ReconcileSlow",
        "histogram_quantile(0.95, sum by (instance, le) (rate(llmgw_reconcile_duration_seconds_bucket[10m]))) > 2",
        "warning", "10m",
        "A reconciler pass on {{ $labels.instance }} takes {{ $value | humanizeDuration }} at p95",
        _join("Every change to what runs waits for the next pass, so replicas are replaced late. A slow store",
              "(StoreSlow) is the usual cause; the control plane's log times each pass."),
    ),
))

NODES = AlertGroup("llmgw-nodes", "The nodes' machines and their engines.", (
    Alert(
        "EnginesExiting", "increase(llmgw_node_engine_exits_total[30m]) > 3", "warning", "0m",
        "Engines on {{ $labels.node }} exited {{ $value | humanize }} times in half an hour",
        _join("Engines there stop without being asked: out of memory, a card failing, a bad argument. Each is",
              "started again by the control plane. `llmgw ctl node logs {{ $labels.node }}` shows why; if it",
              "is the machine, `llmgw ctl drain {{ $labels.node }}`."),
    ),
    Alert(
        "NodeDiskFilling", "llmgw_node_disk_free_bytes / llmgw_node_disk_total_bytes < 0.1", "warning", "10m",
        "{{ $labels.node }}: {{ $labels.path }} has {{ $value | humanizePercentage }} free",
        _join("Weights no longer fit and engines fail to write. Remove weights no model uses, or give the",
              "disk more room; `llmgw doctor` on the node checks the disk free for weights."),
    ),
    Alert(
        "NodeMemoryLow", "llmgw_node_memory_available_bytes / llmgw_node_memory_total_bytes < 0.05",
        "warning", "10m",
        "{{ $labels.node }} has {{ $value | humanizePercentage }} of its memory available",
        _join("The kernel will soon stop a process to free memory, most likely an engine. Fewer replicas on",
              "the node, or ones that load less into host memory."),
    ),
))

GPUS = AlertGroup("llmgw-gpus", "The cards, as the agents read them (NVML, nvidia-smi, the kernel log).", (
    Alert(
        "GPUThermalThrottling", 'llmgw_gpu_throttled{reason=~"sw_thermal|hw_thermal|hw_slowdown"} == 1',
        "warning", "10m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} is slowed by heat ({{ $labels.reason }})",
        _join("Ten minutes held back by temperature: every replica on the card is slower than it should be.",
              "Usually airflow, a fan or the room; look at the card's temperature over time."),
    ),
    Alert(
        "GPUHot", "llmgw_gpu_temperature_celsius > 87", "warning", "10m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} at {{ $value }} °C",
        _join("Ten minutes above 87 °C, where most data-centre cards begin to slow down. Check the",
              "machine's fans and air before it throttles (GPUThermalThrottling)."),
    ),
    Alert(
        "GPUUncorrectedECCErrors", "llmgw_gpu_ecc_errors > 0", "critical", "1m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} has {{ $value }} uncorrected ECC errors",
        _join("Uncorrected memory errors since the driver loaded: what runs on the card may compute on bad",
              "memory. Drain the node (`llmgw ctl drain {{ $labels.node }}`) and have the card looked at."),
    ),
    Alert(
        "GPUXidError", "llmgw_gpu_xid_errors > 0", "warning", "0m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} logged an XID error",
        _join("The driver reported an error on the card in the last 15 minutes; llmgw_gpu_last_xid has its",
              "code. 79 is a card fallen off the bus, 48, 63, 64, 94 and 95 are memory errors: those need",
              "the card looked at (drain the node). Others are often an engine's own fault, and pass."),
    ),
    Alert(
        "GPUOutOfSpareRows", "llmgw_gpu_remap_failure == 1", "critical", "1m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} has no spare memory rows left",
        _join("The card cannot remap another failing row of memory. Drain the node (`llmgw ctl drain",
              "{{ $labels.node }}`) and have the card replaced."),
    ),
    Alert(
        "GPUNeedsReset", "llmgw_gpu_remap_pending == 1 or llmgw_gpu_retirement_pending == 1", "warning", "5m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} has memory repairs waiting for a reset",
        _join("Rows remapped or pages retired take effect only once the card is reset. Drain the node",
              "(`llmgw ctl drain {{ $labels.node }}`), reset the card or reboot, and `llmgw ctl uncordon` it."),
    ),
    Alert(
        "GPUPCIeRetriesClimbing", "increase(llmgw_gpu_pcie_replays_total[1h]) > 100", "warning", "0m",
        "{{ $labels.node }} GPU {{ $labels.gpu }}: {{ $value | humanize }} PCIe retries in an hour",
        _join("The card's link to the host is retrying transfers, which slows loading and serving. A riser,",
              "the slot or a cable is the usual cause."),
    ),
    Alert(
        "GPUNVLinkErrorsClimbing", 'increase(llmgw_gpu_nvlink_errors{kind="crc"}[1h]) > 10', "warning", "0m",
        "{{ $labels.node }} GPU {{ $labels.gpu }}: {{ $value | humanize }} NVLink CRC errors in an hour",
        _join("The card's NVLink links are corrupting transfers: tensor-parallel replicas on it slow down, and a",
              "link that keeps failing takes its replica down with it. `nvidia-smi nvlink -e -i {{ $labels.gpu }}`",
              "on the node says which link; drain the node (`llmgw ctl drain {{ $labels.node }}`) and have the",
              "card, its baseboard or the NVSwitch looked at."),
    ),
    Alert(
        "GPUFailed", 'llmgw_gpu_health{health="failed"} == 1', "critical", "1m",
        "{{ $labels.node }} GPU {{ $labels.gpu }} has failed",
        _join("The agent reads the card as failed, and placement puts no replica on it.",
              "The other alerts on the card say why. Drain the node and have the card looked at."),
    ),
))

STORE = AlertGroup("llmgw-store", "The store: its queries, and its standbys when it is replicated PostgreSQL.", (
    Alert(
        "StoreSlow",
        "histogram_quantile(0.95, sum by (instance, le) (rate(llmgw_store_query_duration_seconds_bucket[5m]))) > 0.5",
        "warning", "10m",
        "Store queries from {{ $labels.instance }} take {{ $value | humanizeDuration }} at p95",
        _join("Admin changes, leadership renewals and usage writes all wait on it. A busy or distant",
              "database, a full pool, or a disk that is slow to sync; the database's own monitoring says which."),
    ),
    Alert(
        "StoreQueryErrors", "sum by (instance, kind) (increase(llmgw_store_query_errors_total[10m])) > 10",
        "warning", "0m",
        "{{ $value | humanize }} store {{ $labels.kind }} queries from {{ $labels.instance }} failed in ten minutes",
        _join("The database refuses or drops queries. `llmgw doctor` on the control plane checks the store;",
              "its log names the error."),
    ),
    Alert(
        "StoreHasNoPrimary",
        'count(max_over_time(llmgw_store_member{role="leader"}[1h])) unless count(llmgw_store_member{role="leader"})',
        "critical", "1m",
        "The replicated store has no primary",
        _join("Every write fails: keys, usage, budgets, leadership. Patroni promotes a standby within its",
              "TTL; a minute without one means it cannot (etcd has lost its majority, or no standby is fit).",
              "`patronictl -c /etc/llmgw/patroni/patroni.yml list` on a member says which."),
    ),
    Alert(
        "StoreStandbyNotStreaming",
        'llmgw_store_member{role!="leader", state!~"streaming|unknown|in_recovery"} == 1',
        "warning", "5m",
        "Store member {{ $labels.member }} is {{ $labels.state }}, not streaming from the primary",
        _join("A standby that does not stream is no standby: if the primary is lost now, there is nothing to",
              "promote. Its PostgreSQL log says why it fell behind or stopped. (A state unknown means the",
              "store's role may not read it: grant it pg_monitor, and this alert watches that standby too.)"),
    ),
    Alert(
        "StoreMemberMissing",
        "llmgw_store_address_members > on (instance) count by (instance) (llmgw_store_member)",
        "warning", "5m",
        "{{ $labels.instance }}'s store address names {{ $value }} members; the primary sees fewer",
        _join("A member of the address is neither the primary nor a standby streaming from it: its machine,",
              "Patroni or PostgreSQL is down, or it no longer replicates. Until it is back, one more failure",
              "leaves no standby to promote. `llmgw doctor` names the members seen; `patronictl -c",
              "/etc/llmgw/patroni/patroni.yml list` on a member names them all."),
    ),
    Alert(
        "StoreStandbyBehind", "llmgw_store_replica_lag_bytes > 64 * 1024 * 1024", "warning", "10m",
        "Store member {{ $labels.member }} is {{ $value | humanize1024 }}B behind the primary",
        _join("Patroni does not promote a standby far behind, so a failover now would find none fit. A slow",
              "disk or network on the standby, or a write load it cannot keep up with."),
    ),
))

MIRROR = AlertGroup("llmgw-mirror", "The mirror that keeps and serves model files.", (
    Alert(
        "MirrorVerifyFailures", "increase(llmgw_mirror_verify_failures_total[1h]) > 0", "critical", "0m",
        "{{ $value | humanize }} model files on {{ $labels.instance }} do not match their checksums",
        _join("A file changed on disk or was written short, so a node fetching it gets wrong weights. `llmgw mirror",
              "verify` names the files; fetch the model again into the mirror."),
    ),
    Alert(
        "MirrorFetchesFailing", 'increase(llmgw_mirror_fetches_total{result="failed"}[1h]) > 0', "warning", "0m",
        "The mirror on {{ $labels.instance }} failed to fetch {{ $value | humanize }} models in an hour",
        _join("Models being added cannot be placed until their files are there. The mirror's log says why:",
              "the registry unreachable, a token missing, the disk full."),
    ),
    Alert(
        "MirrorServingErrors",
        _join('sum by (instance) (rate(llmgw_mirror_file_requests_total{status=~"5.."}[10m]))',
              "/ sum by (instance) (rate(llmgw_mirror_file_requests_total[10m])) > 0.05"),
        "warning", "10m",
        "{{ $value | humanizePercentage }} of file requests to the mirror on {{ $labels.instance }} fail",
        _join("Nodes cannot download weights, so replicas do not start. The mirror's log says why; a full or",
              "failing disk is the usual cause."),
    ),
))

SLO = AlertGroup("llmgw-slo", "Each model's latency against the objectives server.yaml's models[].slo sets.", (
    Alert(
        "ModelTTFTOverSLO",
        _join("histogram_quantile(0.99, sum by (model, le) (rate(llmgw_ttft_seconds_bucket[10m])))",
              '> on (model) max by (model) (llmgw_model_slo_seconds{kind="ttft_p99"})'),
        "warning", "15m",
        "{{ $labels.model }} takes {{ $value | humanizeDuration }} to its first token at p99, past its objective",
        _join("For a quarter of an hour the model's p99 time to first token has been past its slo.ttft_p99.",
              "Give it more replicas (`llmgw ctl model scale`) or move traffic of the lower bands elsewhere;",
              "QueueWaitLong and PoolSaturated say whether requests wait for room."),
    ),
    Alert(
        "ModelTPOTOverSLO",
        _join("histogram_quantile(0.99, sum by (model, le) (rate(llmgw_tpot_seconds_bucket[10m])))",
              '> on (model) max by (model) (llmgw_model_slo_seconds{kind="tpot_p99"})'),
        "warning", "15m",
        "{{ $labels.model }} takes {{ $value | humanizeDuration }} a token at p99, past its objective",
        _join("For a quarter of an hour the model's p99 time per output token has been past its",
              "slo.tpot_p99: its replicas batch more requests than they decode quickly, or a slower card",
              "serves it. A lower concurrency per replica, or more replicas."),
    ),
))

GROUPS: tuple[AlertGroup, ...] = (
    AVAILABILITY, GATEWAY, SLO, ACCOUNTING, TENANTS, GUARD, CONTROL, NODES, GPUS, STORE, MIRROR,
)


def all_alerts() -> list[Alert]:
    return [a for g in GROUPS for a in g.alerts]


def rules_document() -> dict:
    """The rules file as Prometheus reads it (`groups:`), in the order of GROUPS."""
    groups = []
    for group in GROUPS:
        rules = []
        for a in group.alerts:
            rules.append({
                "alert": a.name,
                "expr": a.expr,
                "for": a.wait,
                "labels": {"severity": a.severity},
                "annotations": {"summary": a.summary, "description": a.description},
            })
        groups.append({"name": group.name, "rules": rules})
    return {"groups": groups}


def _check_unique() -> None:
    seen: set[str] = set()
    for a in all_alerts():
        if a.name in seen:  # pragma: no cover - a mistake in this file
            raise ValueError(f"alert {a.name} is defined twice")
        seen.add(a.name)


_check_unique()
