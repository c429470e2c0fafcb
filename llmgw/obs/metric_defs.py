"""Every metric llmgw exports, in one list: name, type, help, labels, and the role that exports it.

This list is the source of docs/monitoring.md (`python -m llmgw.obs.monitoring_doc`) and of the help text
the collectors put on their series (`defn(name)`), and tests/obs scrape each role's real endpoint and fail
when a series there is not here, or differs from it in type or labels.

Names are the reference's, as a query writes them: a counter's name ends in `_total`, a histogram's
series are `_bucket`, `_sum` and `_count` of its name.

Roles:

- `server`: `llmgw server`'s metrics listener (`metrics_listen`, `:9091`): the gateway, the store it
  uses, and the control plane (scheduler, leadership) when `control.enabled`;
- `relayed`: the agents' readings, on the leading control plane's listener, labelled by `node`: what
  the agents send in their heartbeats;
- `agent`: `llmgw agent`'s own listener (agent.yaml `metrics_listen`, off unless set): the same GPU and
  node series as `relayed`, for this node only, read as the heartbeat reads them;
- `mirror`: `llmgw mirror serve`'s files listener (`:8081`), path `/metrics`;
- `all`: every one of the above.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

ROLES = ("all", "server", "relayed", "agent", "mirror")
TYPES = ("counter", "gauge", "histogram", "info")


@attrs.frozen
class MetricDef:
    name: str  #: as queried: llmgw_requests_total, llmgw_ttft_seconds
    type: str  #: counter, gauge, histogram
    help: str  #: one sentence: what a sample means
    labels: tuple[str, ...] = ()
    roles: tuple[str, ...] = ("server",)
    section: str = ""  #: the heading it is listed under in docs/monitoring.md

    @property
    def family(self) -> str:
        """The name prometheus_client's collectors take: a counter's without `_total`."""
        return self.name[: -len("_total")] if self.type == "counter" and self.name.endswith("_total") else self.name


def _defs(section: str, roles: tuple[str, ...], *rows: tuple) -> list[MetricDef]:
    return [MetricDef(name, kind, text, tuple(labels), roles, section) for name, kind, text, labels in rows]


_GPU = ("node", "gpu")
_BOTH = ("agent", "relayed")

METRICS: tuple[MetricDef, ...] = tuple([
    *_defs("Every role", ("all",),
           ("llmgw_build_info", "gauge", "Always 1; the labels say which llmgw runs and on what Python.",
            ("version", "commit", "python", "role")),
           ("process_cpu_seconds_total", "counter", "CPU time the process has used (user and system).", ()),
           ("process_resident_memory_bytes", "gauge", "The process's resident memory.", ()),
           ("process_virtual_memory_bytes", "gauge", "The process's virtual memory.", ()),
           ("process_start_time_seconds", "gauge", "When the process started, in seconds since the epoch.", ()),
           ("process_open_fds", "gauge", "File descriptors the process has open.", ()),
           ("process_max_fds", "gauge", "The most file descriptors the process may open.", ())),
    *_defs("Gateway", ("server",),
           ("llmgw_requests_total", "counter",
            "Requests answered, by model and outcome (ok, error, limited, refused, cancelled), and by the "
            "request tags router.tag_labels names.", ("model", "outcome")),
           ("llmgw_tenant_requests_total", "counter", "Requests answered, by tenant and outcome.",
            ("tenant", "outcome")),
           ("llmgw_request_duration_seconds", "histogram", "Time from a request's arrival to its answer's end.",
            ("model",)),
           ("llmgw_ttft_seconds", "histogram", "Time from arrival to a streamed answer's first event.", ("model",)),
           ("llmgw_tenant_ttft_seconds", "histogram", "Time to first event, by tenant.", ("tenant",)),
           ("llmgw_tpot_seconds", "histogram",
            "Mean time per output token after the first, one sample a request.", ("model",)),
           ("llmgw_output_tokens_per_second", "histogram",
            "Output tokens a second after the first token, one sample a streamed request.", ("model",)),
           ("llmgw_tokens_total", "counter", "Tokens read and written, by model and direction (prompt, completion).",
            ("model", "direction")),
           ("llmgw_tenant_tokens_total", "counter", "Tokens by tenant and direction.", ("tenant", "direction")),
           ("llmgw_queue_wait_seconds", "histogram", "Time a request waited for room on a replica.",
            ("model", "band")),
           ("llmgw_queue_depth", "gauge", "Requests waiting for room, by model and band.", ("model", "band")),
           ("llmgw_pool_saturation", "gauge",
            "A model's replicas' load: requests at them and waiting for them over the requests they take at "
            "once; above 1 requests queue.", ("model",)),
           ("llmgw_model_slo_seconds", "gauge",
            "A model's latency objective from server.yaml models[].slo, by kind (ttft_p99, tpot_p99); only the "
            "ones set.", ("model", "kind")),
           ("llmgw_replica_in_flight", "gauge", "Requests this gateway has at a replica.", ("model", "replica")),
           ("llmgw_replica_healthy", "gauge",
            "1 while a replica takes requests, 0 while it is ejected after failures.", ("model", "replica")),
           ("llmgw_replica_engine_waiting", "gauge", "Requests waiting inside the engine, as last scraped.",
            ("model", "replica")),
           ("llmgw_upstream_retries_total", "counter", "Requests sent again to another replica after a failure.",
            ("model",)),
           ("llmgw_fallbacks_total", "counter", "Requests answered by a fallback model, and why.",
            ("model", "served", "reason")),
           ("llmgw_slo_shed_total", "counter",
            "Requests refused because their model was over its slo.ttft_p99 and their band is one it sheds "
            "(the lowest first).", ("model", "band")),
           ("llmgw_http_errors_total", "counter",
            "Requests the gateway failed on itself (status 500), by route.", ("route",)),
           ("llmgw_model_update_available", "gauge",
            "1 when the repository a served model came from has new files.", ("model",)),
           ("llmgw_notifications_total", "counter",
            "Notifications by sink, event and outcome (sent, failed, dropped).", ("sink", "event", "outcome")),
           ("llmgw_budget_spent_ratio", "gauge",
            "A budget's spend this period over the budget (1 is all of it), by scope (org, team, project, "
            "user), the scope's id as name, and period; every budget in the store, read every 15 s.",
            ("scope", "name", "period")),
           ("llmgw_budget_events_total", "counter",
            "Budget events told, once per budget, period and threshold: a share of budgets.notify_at crossed "
            "(threshold 0.8), or a request refused (threshold refused); scope is org, team, project, user or key.",
            ("scope", "threshold"))),
    *_defs("Guardrails", ("server",),
           ("llmgw_guard_checks_total", "counter", "Guard checks, by stage, policies, action, category and mode.",
            ("stage", "policy", "action", "category", "mode")),
           ("llmgw_guard_latency_seconds", "histogram", "Time one stage's checks took, judges included.",
            ("stage",)),
           ("llmgw_guard_judge_latency_seconds", "histogram", "Time a judge model took to answer.",
            ("judge_model",)),
           ("llmgw_guard_judge_errors_total", "counter", "Judges that gave no verdict, and why.", ("reason",)),
           ("llmgw_guard_fail_open_total", "counter", "Checks served unjudged because no judge answered.", ()),
           ("llmgw_guard_stream_stops_total", "counter", "Streamed answers stopped with content_filter.", ()),
           ("llmgw_guard_redactions_total", "counter", "Values replaced by placeholders, by kind.", ("kind",)),
           ("llmgw_tenant_guard_blocks_total", "counter", "Requests and answers blocked, by tenant.", ("tenant",))),
    *_defs("Control plane", ("server",),
           ("llmgw_leader", "gauge", "1 on the control plane that leads (schedules, takes agents), 0 on a standby.",
            ()),
           ("llmgw_replica_view_age_seconds", "gauge",
            "How old this gateway's copy of the leader's replica set is (0 on the leader; a standby serves from it "
            "while under twice control.lease_ttl).", ()),
           ("llmgw_replica_view_stale", "gauge",
            "1 while this standby's copy of the leader's replica set is too old to serve from: it refuses "
            "requests for the cluster's models with a 503 saying why.", ()),
           ("llmgw_lease_renewals_total", "counter", "Leadership lease renewals this control plane made.", ()),
           ("llmgw_lease_renewal_failures_total", "counter",
            "Leadership lease renewals that failed (the store did not answer, or another holds the lease).", ()),
           ("llmgw_nodes", "gauge",
            "Nodes the leader knows, by state (ready, cordoned, draining, disconnected, lost).", ("state",)),
           ("llmgw_replicas", "gauge", "Replicas the leader placed, by model and state.", ("model", "state")),
           ("llmgw_placements_total", "counter", "Replicas placed on a node, by model.", ("model",)),
           ("llmgw_placement_failures_total", "counter",
            "Placement passes that found no room for a replica a model wants, by why: no_nodes (no node is "
            "ready), quota (a capacity quota), fabric (no fabric has room for a replica over several nodes), "
            "no_fit (every node was turned down).", ("model", "reason")),
           ("llmgw_preemptions_total", "counter",
            "Replicas stopped to make room, by the model they made room for.", ("model",)),
           ("llmgw_replica_start_failures_total", "counter",
            "Replica starts that failed (the engine exited or did not become ready), by model.", ("model",)),
           ("llmgw_model_parks_total", "counter",
            "Times a model was parked after failing to start again and again.", ("model",)),
           ("llmgw_model_parked", "gauge", "1 while a model is parked (not placed until it changes or is retried).",
            ("model",)),
           ("llmgw_reconcile_duration_seconds", "histogram", "Time one reconciler pass took.", ()),
           ("llmgw_placement_pass_seconds", "histogram",
            "Time one reconciler pass spent placing: every decision of the pass through its placement round, "
            "while the control plane's event loop waits.", ()),
           ("llmgw_jobs", "gauge", "Changes to models followed until they serve or fail, by kind and state.",
            ("kind", "state")),
           ("llmgw_gpu_assigned", "gauge", "1 for each card a replica holds, naming the model and replica.",
            ("node", "gpu", "model", "replica"))),
    *_defs("Store", ("server",),
           ("llmgw_store_query_duration_seconds", "histogram", "Time a store query took, by backend and kind "
            "(read, write).", ("backend", "kind")),
           ("llmgw_store_query_errors_total", "counter", "Store queries that failed, by backend and kind.",
            ("backend", "kind")),
           ("llmgw_store_pool_connections", "gauge",
            "PostgreSQL connections in the pool, by state (in_use, idle); the most it opens is the max.",
            ("state",)),
           ("llmgw_store_member", "gauge",
            "1 for each member of a replicated PostgreSQL store the primary sees: the primary itself (role "
            "leader) and each standby by its state (streaming, catchup, ...).", ("member", "host", "role", "state")),
           ("llmgw_store_replica_lag_bytes", "gauge",
            "How far a standby's replay is behind the primary's WAL, in bytes.", ("member",)),
           ("llmgw_store_address_members", "gauge",
            "How many PostgreSQL members the store's address names (its hosts); the primary and its standbys "
            "should be as many.", ()),
           ("llmgw_store_write_errors_total", "counter", "Writes the store failed (not refusals of input).", ()),
           ("llmgw_usage_journal_rows", "gauge", "Usage rows in the journal, waiting for the store.", ()),
           ("llmgw_usage_rows_dropped_total", "counter", "Usage rows neither the store nor the journal took.", ()),
           # shared limits (limits.store: redis://, llmgw.accounting.limits_redis); no series with limits in memory
           ("llmgw_limits_store_up", "gauge",
            "1 while the shared limits store (limits.store, a Redis) answers, 0 while it does not.", ()),
           ("llmgw_limits_local_total", "counter",
            "Requests counted in this process's memory alone because the limits store was down "
            "(limits.on_store_down: local).", ())),
    *_defs("Backups", ("server",),  # backup.schedule's job (llmgw.backup.schedule); no series without one
           ("llmgw_backup_runs_total", "counter",
            "Scheduled backups by outcome: ok (made, read back, copied everywhere) or failed.", ("outcome",)),
           ("llmgw_backup_last_success_timestamp_seconds", "gauge",
            "When the last scheduled backup that succeeded was started (Unix time); 0 before the first.", ()),
           ("llmgw_backup_last_failed", "gauge",
            "1 when the last scheduled backup failed (to write, to read back, or to copy), 0 otherwise.", ()),
           ("llmgw_backup_last_size_bytes", "gauge", "The size of the last scheduled backup's archive.", ())),
    *_defs("GPUs", _BOTH,
           ("llmgw_gpu_info", "gauge", "Always 1: the card's uuid, name and llmgw class.",
            (*_GPU, "uuid", "name", "gpu_class")),
           ("llmgw_gpu_memory_used_bytes", "gauge", "Memory in use on the card.", _GPU),
           ("llmgw_gpu_memory_total_bytes", "gauge", "The card's memory.", _GPU),
           ("llmgw_gpu_utilization_percent", "gauge",
            "Share of the last sample period a kernel ran on the card (none on a card in MIG mode).", _GPU),
           ("llmgw_gpu_memory_utilization_percent", "gauge",
            "Share of the last sample period the card's memory was read or written.", _GPU),
           ("llmgw_gpu_temperature_celsius", "gauge", "The card's core temperature.", _GPU),
           ("llmgw_gpu_power_watts", "gauge", "The card's power draw.", _GPU),
           ("llmgw_gpu_power_limit_watts", "gauge", "The power limit the driver enforces on the card.", _GPU),
           ("llmgw_gpu_sm_clock_mhz", "gauge", "The card's SM clock now.", _GPU),
           ("llmgw_gpu_throttled", "gauge",
            "1 while the reason holds the card's clocks down: sw_power_cap, hw_slowdown, sw_thermal, "
            "hw_thermal, hw_power_brake.", (*_GPU, "reason")),
           ("llmgw_gpu_ecc_errors", "gauge", "Uncorrected ECC errors since the driver loaded.", _GPU),
           ("llmgw_gpu_xid_errors", "gauge",
            "Distinct XID error codes the kernel log shows for the card in the last 15 minutes.", _GPU),
           ("llmgw_gpu_last_xid", "gauge", "The code of the card's most recent XID error in the last 15 minutes.",
            _GPU),
           ("llmgw_gpu_pcie_replays_total", "counter", "PCIe replays since the driver loaded (a bad link climbs).",
            _GPU),
           ("llmgw_gpu_nvlink_errors", "gauge",
            "NVLink errors since the driver loaded, summed over the card's links, by kind (crc, replay, recovery); "
            "none for a card without NVLink.", (*_GPU, "kind")),
           ("llmgw_gpu_remap_pending", "gauge", "1 while memory rows wait for a reset to be remapped.", _GPU),
           ("llmgw_gpu_remap_failure", "gauge", "1 when the card has no spare memory rows left.", _GPU),
           ("llmgw_gpu_retirement_pending", "gauge", "1 while memory pages wait for a reset to be retired.", _GPU),
           ("llmgw_gpu_foreign_memory_bytes", "gauge",
            "Memory on the card held by processes that are not this node's engines.", _GPU),
           ("llmgw_gpu_health", "gauge",
            "1 for the card's health now (ok, degraded, failed), 0 for the others; placement keeps out what is "
            "not ok.", (*_GPU, "health"))),
    *_defs("Nodes", _BOTH,
           ("llmgw_node_cpu_utilization_percent", "gauge", "The node's CPU use between two heartbeats.", ("node",)),
           ("llmgw_node_load1", "gauge", "The node's one-minute load average.", ("node",)),
           ("llmgw_node_cpu_cores", "gauge", "Logical CPUs the agent may use.", ("node",)),
           ("llmgw_node_memory_total_bytes", "gauge", "The node's memory (or its cgroup's limit).", ("node",)),
           ("llmgw_node_memory_available_bytes", "gauge", "Memory the node has available.", ("node",)),
           ("llmgw_node_disk_total_bytes", "gauge", "The size of the disk under a directory the agent writes to.",
            ("node", "path")),
           ("llmgw_node_disk_free_bytes", "gauge", "Free space on that disk.", ("node", "path")),
           ("llmgw_node_cpu_temperature_celsius", "gauge",
            "The CPU package temperature (the hottest), from hwmon; none on a machine without the sensor.",
            ("node",)),
           ("llmgw_node_inlet_temperature_celsius", "gauge",
            "The board's inlet or ambient sensor, from hwmon, where there is one.", ("node",)),
           ("llmgw_node_cpu_power_watts", "gauge", "The CPU packages' power, from RAPL's energy counters.",
            ("node",)),
           ("llmgw_node_engines", "gauge", "Engines (replica shards) the node runs, by state.", ("node", "state")),
           ("llmgw_node_engine_exits_total", "counter",
            "Engines on the node that exited or failed without being asked to stop (each is started again "
            "by the control plane).", ("node",))),
    *_defs("Mirror", ("mirror",),
           ("llmgw_mirror_bytes_served_total", "counter", "Bytes of model files sent to nodes.", ()),
           ("llmgw_mirror_file_requests_total", "counter", "File requests answered, by status code.",
            ("status",)),
           ("llmgw_mirror_fetches_total", "counter",
            "Models fetched into the mirror from their registry, by result (ok, failed).", ("result",)),
           ("llmgw_mirror_verify_failures_total", "counter",
            "Problems verifying found in the mirror's files: missing, the wrong size, or a sha256 not matching "
            "the sidecar's.", ())),
])

_BY_NAME = {m.name: m for m in METRICS}
_BY_FAMILY = {m.family: m for m in METRICS}


def defn(name: str) -> MetricDef:
    """The definition of a metric, by its queried name or its family name; KeyError names it when missing."""
    found = _BY_NAME.get(name) or _BY_FAMILY.get(name)
    if found is None:
        raise KeyError(f"metric {name!r} is not in llmgw/obs/metric_defs.py: add it there first")
    return found


def for_role(role: str) -> list[MetricDef]:
    """The metrics one role's endpoint may show (`all` ones included)."""
    wanted = {"all", role} | ({"agent", "relayed"} if role == "agent" else set())
    if role == "server":
        wanted.add("relayed")
    return [m for m in METRICS if set(m.roles) & wanted]


def sections() -> Iterable[str]:
    seen: list[str] = []
    for m in METRICS:
        if m.section not in seen:
            seen.append(m.section)
    return seen
