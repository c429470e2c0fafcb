"""Watch: Overview, Nodes, GPUs, Replicas and Logs (a node's agent log); Jobs is in jobs.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import urwid

from llmgw.console.views.base import Action, TableView, TextView, View, counts, gib, money
from llmgw.console.widgets import ChoiceField, Row, Table, TextField
from llmgw.console.widgets.lines import Lines

__all__ = ["GpusView", "LogsView", "NodesView", "OverviewView", "ReplicasView", "node_lines"]


class OverviewView(TextView):
    title = "Overview"
    watches = ("summary",)

    def lines(self) -> list[Any]:
        s = self.model.data("summary")
        lines: list[Any] = [("title", f"llmgw {s['version']} · store {s['store']}"), ""]
        c = s["cluster"]
        if c is None:
            lines.append(f"scheduler: {s['scheduler']}")
        else:
            leading = "leading" if c["leading"] else f"standby; the leader is {c['leader'] or 'unknown'}"
            lines.append(f"control plane: {leading}")
            lines.append(f"nodes: {counts(c['nodes'])}")
            gpus = ", ".join(f"{g['class']} {g['in_use']}/{g['total']} in use"
                             + (f" ({g['total'] - g['healthy']} unhealthy)" if g["healthy"] < g["total"] else "")
                             for g in c["gpus"])
            lines.append(f"GPUs: {gpus or 'none'}")
            lines.append(f"replicas: {counts(c['replicas'])}")
            lines.append(f"models: {counts(c['models'])}")
            if c["attention"]:
                lines += ["", ("warn", "Needs a look:")]
                lines += [("warn", f"  {a['name']}: {a['status']}: {a['reason']}") for a in c["attention"]]
        lines += ["", (f"last 24h: {s['requests_24h']} requests, {s['tokens_24h']} tokens, "
                      f"{money(s['cost_micros_24h'], s['currency'])}"),
                  "", ("dim", "The same as `llmgw ctl status`; read again every 3 seconds.")]
        return lines


def node_lines(n: dict[str, Any]) -> list[str]:
    lines = [f"{n['id']}: {n['state']}" + (f" ({n['cordon_reason']})" if n["cordon_reason"] else ""),
             f"address {n['address'] or '-'}, host {n['hostname'] or '-'}, agent {n['agent_version'] or '?'}",
             f"{n['cores']} cores, {gib(n['memory_total_bytes'])} memory ({gib(n['memory_available_bytes'])} free)"]
    lines += [f"gpu {g['index']}: {g['class']} {g['name']} {gib(g['memory_total_bytes'])} {g['health']}"
              for g in n["gpus"]]
    if n["labels"]:
        lines.append("labels: " + ", ".join(f"{k}={v}" for k, v in sorted(n["labels"].items())))
    if n["engines"]:
        lines.append("engines: " + ", ".join(f"{k} {v}" for k, v in sorted(n["engines"].items())))
    if n.get("disconnect_reason"):
        lines.append(f"disconnected: {n['disconnect_reason']} ({n['silent_s']:.0f}s silent)")
    lines.append("replicas: " + (", ".join(n["replicas"]) or "none"))
    return lines


class NodesView(TableView):
    title = "Nodes"
    watches = ("nodes",)
    columns = ("node", "state", "address", "gpus", "cores", "memory", "replicas", "agent", "engines")

    def caption_text(self) -> Any:
        nodes = self.model.data("nodes", [])
        states: dict[str, int] = {}
        for n in nodes:
            states[n["state"]] = states.get(n["state"], 0) + 1
        return ["Nodes: ", counts(states), ("dim", " · llmgw ctl nodes, cordon, drain, node remove")]

    def rows(self) -> list[Row]:
        rows = []
        for n in self.model.data("nodes", []):
            classes = ", ".join(sorted({g["class"] for g in n["gpus"]}))
            gpus = f"{classes} x{len(n['gpus'])}" if n["gpus"] else "-"
            attr = None if n["state"] == "ready" else "warn"
            rows.append(Row(n["id"], (n["id"], n["state"], n["address"], gpus, str(n["cores"]),
                                      gib(n["memory_total_bytes"]), str(len(n["replicas"])),
                                      n["agent_version"] or "-",
                                      ", ".join(f"{k} {v}" for k, v in sorted(n["engines"].items())) or "-"), attr))
        return rows

    def _node(self, node_id: str) -> dict[str, Any] | None:
        return next((n for n in self.model.data("nodes", []) if n["id"] == node_id), None)

    def row_actions(self, row: Row) -> list[Action]:
        node = self._node(row.key) or {"cordoned": False, "draining": False}
        actions: list[Action] = [("Details", lambda: self.details(row.key))]
        if not node["cordoned"]:
            actions.append(("Cordon…", lambda: self.cordon(row.key, "cordon")))
        if node["cordoned"] or node["draining"]:
            actions.append(("Uncordon", lambda: self.uncordon(row.key)))
        if not node["draining"]:
            actions.append(("Drain…", lambda: self.cordon(row.key, "drain")))
        actions.append(("Remove from the cluster…", lambda: self.remove(row.key)))
        return actions

    def details(self, node_id: str) -> None:
        self.app.run(self.actions.node(node_id), lambda n: self.app.show(f"Node {node_id}", node_lines(n)),
                     busy="reading…")

    def cordon(self, node_id: str, verb: str) -> None:
        node = self._node(node_id) or {}
        intro = {"cordon": ["Place nothing new on it; what runs there stays."],
                 "drain": ["Move its replicas off, one at a time, each replacement up before the original stops."]}
        self.app.form(
            f"{verb.capitalize()} {node_id}",
            [TextField("reason", "Reason", node.get("cordon_reason", ""), hint="said in Nodes and the audit log")],
            lambda v: self.actions.node_state(node_id, verb, v["reason"] or ""),
            done=lambda n: self.app.note(f"{n['id']}: {n['state']}"),
            intro=intro[verb],
            confirm=(lambda v: [f"Drain {node_id}? Its replicas move off it."]) if verb == "drain" else None)

    def uncordon(self, node_id: str) -> None:
        self.app.run(self.actions.node_state(node_id, "uncordon"), lambda n: self.app.note(f"{n['id']}: {n['state']}"))

    def remove(self, node_id: str) -> None:
        self.app.ask([f"Remove {node_id} from the cluster?",
                      "The control plane forgets it; the machine is not touched."],
                     lambda: self.app.run(self.actions.remove_node(node_id),
                                          lambda n: self.app.note(f"{n['id']}: removed from the cluster")))


class GpusView(TableView):
    title = "GPUs"
    watches = ("nodes", "replicas")
    columns = ("node", "gpu", "class", "name", "memory", "health", "model")

    def caption_text(self) -> Any:
        total = sum(len(n["gpus"]) for n in self.model.data("nodes", []))
        return [f"GPUs: {total} cards", ("dim", " · what each card is and the replica holding it")]

    def rows(self) -> list[Row]:
        holders: dict[tuple[str, int], str] = {}
        for r in self.model.data("replicas", []):
            for index in r["gpus"]:
                holders[(r["node"], index)] = f"{r['model']} ({r['id']})"
        rows = []
        for n in self.model.data("nodes", []):
            for g in n["gpus"]:
                rows.append(Row((n["id"], g["index"]),
                                (n["id"], str(g["index"]), g["class"], g["name"] or "-", gib(g["memory_total_bytes"]),
                                 g["health"], holders.get((n["id"], g["index"]), "-")),
                                None if g["health"] == "ok" else "error"))
        return rows

    def row_actions(self, row: Row) -> list[Action]:
        node_id = row.key[0]
        nodes = {n["id"]: n for n in self.model.data("nodes", [])}
        if node_id not in nodes:
            return []
        return [("Its node's details", lambda: self.app.show(f"Node {node_id}", node_lines(nodes[node_id])))]


class ReplicasView(TableView):
    title = "Replicas"
    watches = ("replicas",)
    columns = ("replica", "model", "node", "state", "gpus", "for", "note")

    def caption_text(self) -> Any:
        replicas = self.model.data("replicas", [])
        states: dict[str, int] = {}
        for r in replicas:
            states[r["state"]] = states.get(r["state"], 0) + 1
        return ["Replicas: ", counts(states), ("dim", " · llmgw ctl replicas")]

    def rows(self) -> list[Row]:
        return [Row(r["id"], (r["id"], r["model"], r["node"], r["state"], ",".join(map(str, r["gpus"])) or "cpu",
                              f"{r['for_s']:.0f}s", r["stopping_because"] or r["message"]),
                    None if r["state"] == "ready" else "warn")
                for r in self.model.data("replicas", [])]

    def _replica(self, rid: str) -> dict[str, Any] | None:
        return next((r for r in self.model.data("replicas", []) if r["id"] == rid), None)

    def row_actions(self, row: Row) -> list[Action]:
        r = self._replica(row.key)
        if r is None:
            return []
        actions: list[Action] = [("Details", lambda: self.app.show(f"Replica {r['id']}", replica_lines(r))),
                                 ("Its engine log", lambda: self.engine_log(r))]
        if r["state"] != "stopping":
            actions.append(("Restart it…", lambda: replica_restart_form(self.app, r["id"])))
        actions.append((f"Restart {r['model']}'s replicas…", lambda: restart_form(self.app, r["model"])))
        return actions


    def engine_log(self, r: dict[str, Any]) -> None:
        def shown(data: dict[str, Any]) -> None:
            lines = [(LogsView.LEVEL_ATTRS.get(line["level"]), line["text"]) for line in data["lines"]]
            lines = [(attr, text) if attr else text for attr, text in lines] or [("dim", "(nothing written yet)")]
            self.app.show(f"{r['id']}'s engine log on {r['node']}, newest last", lines, at_end=True)

        self.app.run(self.actions.engine_log(r["node"], r["id"]), shown, busy="reading…")


def replica_lines(r: dict[str, Any]) -> list[str]:
    lines = [f"{r['id']}: {r['state']} for {r['for_s']:.0f}s", (f"model {r['model']}, profile {r['profile'] or '-'}, "
             f"engine {r['engine'] or '-'}"), (f"node {r['node']}, port {r['port'] or '-'}, "
             f"GPUs {','.join(map(str, r['gpus'])) or 'none'}, {r['cores']} cores, {gib(r['memory_bytes'])} memory")]
    if r.get("replaces"):
        lines.append(f"replaces {r['replaces']}")
    if r.get("stopping_because"):
        lines.append(f"stopping: {r['stopping_because']}")
    if r.get("message"):
        lines.append(f"its agent said: {r['message']}")
    return lines


def restart_lines(result: dict[str, Any]) -> list[str]:
    """What a restart's answer says: the replicas it restarts, and the job following it."""
    lines = [f"{result['model']}: restarting {', '.join(result['replicas']) or 'nothing (no replica runs)'}"]
    if result.get("job"):
        lines.append(f"job {result['job']} follows it: Jobs shows its steps (`llmgw ctl jobs {result['job']}`)")
    return lines


def restart_form(app: Any, model: str) -> None:
    app.form(f"Restart {model}'s replicas",
             [ChoiceField("in_place", "How", ["a replacement first, then the old one stops",
                                              "in place: stop and start each where it is"], values=[False, True])],
             lambda v: app.actions.restart(model, v["in_place"]),
             done=lambda r: app.show("Restarting", restart_lines(r)),
             intro=["One at a time. `llmgw ctl model restart` does the same."], apply_label="Restart")


def replica_restart_form(app: Any, replica_id: str) -> None:
    app.form(f"Restart {replica_id}",
             [ChoiceField("in_place", "How", ["a replacement first, then this one stops",
                                              "in place: stop it, then start a new one"], values=[False, True])],
             lambda v: app.actions.restart_replica(replica_id, v["in_place"]),
             done=lambda r: app.show("Restarting", restart_lines(r)),
             intro=["Its model's other replicas are not touched. `llmgw ctl replica restart` does the same."],
             apply_label="Restart")


class LogsView(View):
    """The nodes; Enter on one shows its agent's log, newest at the bottom, read again every 3 s while shown."""

    title = "Logs"
    columns = ("node", "state", "address", "agent")
    #: How each level a line has is coloured.
    LEVEL_ATTRS: ClassVar[dict[str, str]] = {"error": "error", "warning": "warn", "debug": "dim"}

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.node: str | None = None  #: the node whose log is shown; None shows the list
        self._fresh = False  #: its log has not been shown yet: go to the end when it is

    @property
    def watches(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("nodes",) if self.node is None else ("nodes", "logs")

    def build(self) -> urwid.Widget:
        self.table = Table(self.columns)
        self.list_caption = urwid.Text(["Logs: each node's agent log",
                                        ("dim", " · Enter reads one; the same as `llmgw ctl node logs NODE`")])
        self.list_frame = urwid.Frame(self.table, header=urwid.Pile([self.list_caption, urwid.Divider()]))
        self.lines = Lines()
        self.log_caption = urwid.Text("")
        self.log_frame = urwid.Frame(self.lines, header=urwid.Pile([self.log_caption, urwid.Divider()]))
        self.holder = urwid.WidgetPlaceholder(self.list_frame)
        return self.holder

    def key_contexts(self) -> tuple[str, ...]:
        return ("logs-list", "panel") if self.node is None else ("logs",)

    def commands(self) -> dict[str, Callable[[], None]]:
        self.widget  # noqa: B018 - built on first use
        if self.node is None:
            return {"act": self.open_focused} if self.table.focused is not None else {}
        return {"top": self.lines.go_to_start, "end": self.lines.go_to_end, "reread": self.reread}

    # ---- the list

    def refresh(self) -> None:
        if self._widget is None:
            return
        if self.node is None:
            missing = self.unread()
            self.table.set_rows([] if missing else self._rows(), empty=missing or "No node is known yet.")
        else:
            self._show_log()

    def _rows(self) -> list[Row]:
        return [Row(n["id"], (n["id"], n["state"], n["address"] or "-", n["agent_version"] or "-"),
                    None if n["state"] in ("ready", "cordoned", "draining") else "warn")
                for n in self.model.data("nodes", [])]

    def open_focused(self) -> None:
        row = self.table.focused
        if row is not None:
            self.open_log(row.key)

    def open_log(self, node: str) -> None:
        """Show `node`'s agent log (read now, and again every 3 s while shown)."""
        self.widget  # noqa: B018
        self.node = node
        self._fresh = True
        self.model.read_logs(node)
        self.holder.original_widget = self.log_frame
        self.refresh()
        self.app.update_lines()

    def back(self) -> bool:
        if self.node is None:
            return False
        node, self.node = self.node, None
        self.model.read_logs(None)
        self.holder.original_widget = self.list_frame
        self.refresh()
        self.table.focus_key(node)
        return True

    # ---- one node's log

    def reread(self) -> None:
        self.model.refresh(["logs"])

    def _show_log(self) -> None:
        w = self.model["logs"]
        data = w.data if isinstance(w.data, dict) and w.data.get("node") == self.node else None
        if data is None:
            said = (("error", f"Could not read {self.node}'s log: {w.error}") if w.error
                    else ("dim", f"Reading {self.node}'s agent log…"))
            self.lines.set_lines([said], follow=True)
            self.log_caption.set_text([("title", f"{self.node}'s agent log")])
            return
        lines = [(self.LEVEL_ATTRS.get(line["level"]), line["text"]) for line in data["lines"]]
        self.lines.set_lines(lines or [("dim", "Its agent's log is empty.")], follow=True if self._fresh else None)
        self._fresh = False
        self.log_caption.set_text(self._log_caption(data))

    def _log_caption(self, data: dict[str, Any]) -> list[Any]:
        levels = [line["level"] for line in data["lines"]]
        node = next((n for n in self.model.data("nodes", []) if n["id"] == self.node), None)
        parts: list[Any] = [("title", f"{self.node}'s agent log"), f" · {node['state']}" if node else "",
                            f" · {len(levels)} lines, newest last"]
        for level, attr, word in (("error", "error", "error"), ("warning", "warn", "warning")):
            n = levels.count(level)
            if n:
                parts += [" · ", (attr, f"{n} {word}{'s' if n > 1 else ''}")]
        age = self.model.age("logs")
        parts.append(("dim", f" · read {age:.0f}s ago" if age is not None else ""))
        return parts
