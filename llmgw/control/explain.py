"""`explain(model)`: where a model runs, what it wants, and why not more.

What `llmgw ctl explain-placement MODEL` prints and the admin API returns:
the model's status in one word and one sentence, its replicas, the last
placement asked for it with every node's rejection, the failures behind a
back-off or a parking, the engine's last lines, and where the next replica
would go now (a dry run that changes nothing).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from llmgw.control.devices import node_devices
from llmgw.control.placement import Decision

if TYPE_CHECKING:
    from llmgw.control.reconciler import Reconciler

STATUSES = ("invalid", "parked", "backing_off", "unplaced", "starting", "ready", "short", "stopped", "standby")


def _decision(decision: Decision | None, at: float = 0.0) -> dict[str, Any] | None:
    if decision is None:
        return None
    placement = decision.placement
    return {
        "at": dt.datetime.fromtimestamp(at, dt.UTC).isoformat() if at else None,
        "placed_on": placement.node if placement else None,
        "gpus": list(placement.gpus) if placement else [],
        "preempts": list(placement.preempts) if placement else [],
        "why": placement.why if placement else "",
        "summary": decision.summary(),
        "rejections": decision.sentences(),
        "nodes": list(placement.nodes) if placement else [],
        "fabric": decision.fabric,
    }


def kept_out(rec: Reconciler, cm) -> list[dict[str, Any]]:
    """Every card of a class the model's GPU profiles ask for that placement keeps out, on every node, and why."""
    classes = {p.gpu_class for p in cm.config.profiles if p.gpus > 0}
    if not classes:
        return []
    out = []
    for node in sorted(rec.inventory.nodes(), key=lambda n: n.id):
        for d in node_devices(node.gpus):
            if d.kept_out and ("" in classes or d.gpu_class in classes):
                out.append({"node": node.id, "device": d.index, "label": d.label, "class": d.gpu_class,
                            "reason": d.kept_out})
    return out


def explain(rec: Reconciler, name: str) -> dict[str, Any]:
    """Everything known about why `name` runs where it does, or does not run. KeyError when unknown."""
    cm = rec.catalog.get(name)
    if cm is None:
        raise KeyError(name)
    now = rec.clock()
    st = rec.models.get(cm.name)
    replicas = sorted((r for r in rec.records.values() if r.model == cm.name), key=lambda r: r.created)
    ready = sum(1 for r in replicas if r.live and r.state == "ready")
    starting = sum(1 for r in replicas if r.live and r.state == "starting")
    scaling = cm.scaling
    wanted = rec.wanted_now(cm) if cm.valid and cm.runs_on_cluster else 0

    status, reason = _status(rec, cm, st, ready, starting, wanted, now)
    out: dict[str, Any] = {
        "model": cm.name,
        "origin": cm.origin,
        "class": cm.model_class,
        "owner": cm.config.owner,
        "scaling": {"min": scaling.min, "max": scaling.max, "on_demand": scaling.on_demand,
                    "idle_timeout": str(scaling.idle_timeout), "from": cm.scaling_from,
                    **_schedule(rec, cm)},
        "status": status,
        "reason": reason,
        "wanted": wanted,
        "ready": ready,
        "starting": starting,
        "replicas": [r.describe(now) for r in replicas],
        "problems": list(cm.problems),
        "failures": st.failures if st else 0,
        "retry_in_s": round(max(0.0, st.next_try - now), 1) if st and st.next_try > now else None,
        "parked": bool(st and st.parked),
        "last_error": st.last_error if st else "",
        "log_tail": list(st.last_log_tail) if st else [],
        "last_placement": _decision(st.decision, st.decision_at) if st else None,
        "drain_blocked": _decision(st.drain_blocked) if st and st.drain_blocked else None,
        "next_placement": None,
        "kept_out": kept_out(rec, cm) if cm.valid and cm.runs_on_cluster else [],
    }
    if cm.valid and cm.runs_on_cluster and rec.active:
        out["next_placement"] = _decision(rec.dry_run(cm))
    return out


def _schedule(rec: Reconciler, cm) -> dict[str, Any]:
    """What the model's schedule makes of min and max now (nothing when it has none)."""
    if not cm.scaling.schedule:
        return {}
    bounds = rec.bounds(cm)
    return {"schedule": {"min": bounds.min, "max": bounds.max, "window": bounds.window,
                         "opens_in_s": round(bounds.opens_in) if bounds.opens_in else None,
                         "timezone": rec.control.timezone}}


def _status(rec: Reconciler, cm, st, ready: int, starting: int, wanted: int, now: float) -> tuple[str, str]:
    if cm.problems:
        return "invalid", f"it cannot run until its definition is fixed: {'; '.join(cm.problems)}"
    if not cm.runs_on_cluster:
        return "ready", "forwarded to a provider; nothing to place"
    if not rec.active:
        return "standby", rec.inactive_reason or "this control plane does not lead; ask the leader"
    if st is not None and st.parked:
        return "parked", st.park_reason + f"; `llmgw ctl model retry {cm.name}` starts it again"
    if wanted == 0 and ready == 0 and starting == 0:
        if cm.scaling.max == 0:
            return "stopped", "scaled to a maximum of 0 replicas"
        if cm.scaling.on_demand:
            return "stopped", "on demand: it starts at its next request"
        return "stopped", "no replica is wanted"
    if st is not None and st.next_try > now and ready + starting < wanted:
        return "backing_off", (f"{st.failures} failed start{'s' if st.failures != 1 else ''} in a row; "
                               f"next try in {st.next_try - now:.0f} s; the last: {st.last_error}")
    taken = rec.preemption.words(cm.name)
    if ready + starting < wanted and taken:
        return "unplaced", f"{taken}; it is placed again when room frees"
    if ready + starting < wanted and st is not None and st.decision is not None and not st.decision.placed:
        wait = rec.preemption.wait_left(cm.name, now)
        return "unplaced", st.decision.summary() + (f"; it may stop replicas for room again in {wait:.0f} s"
                                                    if wait else "")
    if starting and ready < wanted:
        return "starting", f"{ready} of {wanted} ready, {starting} starting"
    if ready < wanted:
        return "short", f"{ready} of {wanted} ready; the next pass places the rest"
    return "ready", f"{ready} of {wanted} ready"


def explain_text(info: dict[str, Any]) -> str:
    """The explanation as lines for a terminal."""
    origin = "server.yaml" if info["origin"] == "file" else "added at run time"
    s = info["scaling"]
    lines = [
        f"{info['model']} ({info['class']}, {origin}): {info['status']}",
        f"  {info['reason']}",
        f"  wants {info['wanted']} (min {s['min']}, max {s['max']}"
        + (f", on demand, idle after {s['idle_timeout']}" if s["on_demand"] else "")
        + f"); {info['ready']} ready, {info['starting']} starting",
    ]
    if s.get("schedule"):
        now = s["schedule"]
        if now["window"]:
            early = f", prewarmed: it opens in {now['opens_in_s']} s" if now["opens_in_s"] else ""
            lines.append(f"  scheduled: min {now['min']}, max {now['max']} for the window {now['window']} "
                         f"({now['timezone']}){early}")
        else:
            lines.append(f"  scheduled: outside every window ({now['timezone']}), so min and max as written")
    if info["replicas"]:
        lines.append("  replicas:")
        for r in info["replicas"]:
            gpus = ",".join(map(str, r["gpus"])) or "cpu"
            extra = f" ({r['stopping_because']})" if r["stopping_because"] else (f" ({r['message']})" if r["message"] else "")
            lines.append(f"    {r['id']}  {r['node']}  {r['state']}  gpus {gpus}{extra}")
            shards = r.get("shards") or []
            if len(shards) > 1:  # a replica over several nodes: each shard by rank
                for shard in shards:
                    cards = ",".join(map(str, shard["gpus"])) or "cpu"
                    lines.append(f"      rank {shard['rank']}  {shard['shard_id']}  {shard['node']}  {shard['state']}"
                                 f"  gpus {cards}")
    if info["failures"]:
        retry = f"; next try in {info['retry_in_s']:.0f} s" if info["retry_in_s"] else ""
        lines.append(f"  {info['failures']} failed start{'s' if info['failures'] != 1 else ''} in a row{retry}")
    if info["last_error"]:
        lines.append(f"  last error: {info['last_error']}")
    for title, key in (("last placement", "last_placement"), ("drain", "drain_blocked"),
                       ("the next replica now", "next_placement")):
        d = info.get(key)
        if not d:
            continue
        when = f" ({d['at']})" if d.get("at") else ""
        if d["placed_on"]:
            where = f"on {d['placed_on']}"
        else:
            where = "no node can run it" if d["rejections"] else d["summary"]
        if d["placed_on"] and len(d.get("nodes") or []) > 1:
            where = f"on {', '.join(d['nodes'])}"
        lines.append(f"  {title}{when}: {where}")
        if d["placed_on"] and d["why"]:
            lines.append(f"    because: {d['why']}")
        if not d["placed_on"] and d.get("fabric"):
            lines.append(f"    {d['fabric']}")
        lines.extend(f"    {sentence}" for sentence in d["rejections"])
    if info.get("kept_out"):
        lines.append("  cards kept out:")
        lines.extend(f"    {k['node']} {k['label']} ({k['class']}): {k['reason']}" for k in info["kept_out"])
    if info["log_tail"]:
        lines.append("  the engine's last lines:")
        lines.extend(f"    {line}" for line in info["log_tail"][-20:])
    return "\n".join(lines)
