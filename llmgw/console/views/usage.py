"""Watch: Usage (the last 24 hours by organization, team or project; E exports CSV) and capacity Quotas."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from llmgw.console.views.base import Action, TableView, gib, money
from llmgw.console.widgets import ChoiceField, Row, TextField
from llmgw.console.widgets.form import size, text, whole

__all__ = ["QuotasView", "UsageView"]

EXPORT_GROUPS = ("org", "team", "project", "user", "key", "model")
PERIODS = ("day", "hour", "month", "total")
SCOPE_KINDS = ("org", "team", "project")


class UsageView(TableView):
    title = "Usage"
    watches = ("usage",)
    columns = ("group", "requests", "errors", "prompt", "completion", "cost", "latency_ms")
    contexts = ("usage", "panel")

    def caption_text(self) -> Any:
        return [f"Usage, the last 24 hours by {self.model.usage_by}", ("dim", (" · → groups by the next of "
                "org, team, project · E exports CSV · llmgw ctl usage"))]

    def rows(self) -> list[Row]:
        report = self.model.data("usage")
        currency = report["currency"]
        return [Row(r["group"] or "-", (r["label"] or r["group"] or "(none)", str(r["requests"]), str(r["errors"]),
                                        str(r["prompt_tokens"]), str(r["completion_tokens"]),
                                        money(r["cost_micros"], currency), f"{r['latency_ms_avg']:.0f}"))
                for r in report["rows"]]

    def refresh(self) -> None:
        super().refresh()
        if self._widget is not None and self.model.data("usage") is not None and not self.table.walker.rows:
            self.table.set_rows([], empty=f"No requests in the last 24 hours by {self.model.usage_by}.")

    def commands(self):
        found = super().commands()
        found.pop("act", None)
        found["regroup"] = self.regroup
        found["export"] = self.export
        return found

    def regroup(self) -> None:
        by = self.model.cycle_usage()
        self.refresh()
        self.app.note(f"Usage by {by}")

    def export(self) -> None:
        default = os.path.abspath(f"usage-{dt.date.today().isoformat()}.csv")

        def by(value: str) -> str:
            groups = [g.strip() for g in value.split(",") if g.strip()]
            for g in groups:
                if g not in EXPORT_GROUPS:
                    raise ValueError(f"By: {g!r} is not one of {', '.join(EXPORT_GROUPS)}")
            if len(set(groups)) != len(groups):
                raise ValueError("By: a group is named twice")
            return ",".join(groups)

        def path(value: str) -> str:
            value = os.path.abspath(os.path.expanduser(value.strip()))
            if not value or value.endswith(os.sep):
                raise ValueError("File: give the path of the file to write")
            folder = os.path.dirname(value)
            if not os.path.isdir(folder):
                raise ValueError(f"File: the folder {folder} does not exist")
            if os.path.isdir(value):
                raise ValueError(f"File: {value} is a folder")
            return value

        def send(values: dict[str, Any]):
            query = {"by": values["by"], "period": values["period"], "from": values["since"]}
            if values["until"]:
                query["to"] = values["until"]
            return self._export(values["path"], query)

        self.app.form("Export usage as CSV", [
            TextField("path", "File", default, path, hint="written on this machine"),
            TextField("by", "By", "project", by, hint=f"any of {', '.join(EXPORT_GROUPS)}, by commas; empty for none"),
            ChoiceField("period", "Period", list(PERIODS)),
            TextField("since", "From", "30d", text("From", required=True), hint="a date, a time, or a span back: 30d"),
            TextField("until", "To", "", text("To"), hint="empty: now")],
            send, done=lambda result: self.app.show("Exported", [result]),
            confirm=lambda v: [f"{v['path']} exists. Replace it?"] if os.path.exists(v["path"]) else None,
            intro=["`llmgw ctl usage export` does the same."], apply_label="Export")

    async def _export(self, path: str, query: dict[str, Any]) -> str:
        rows = await self.actions.export_usage(path, query)
        return f"Wrote {rows} rows to {path}."


def _many(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _capacity(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    parts = [_many(c["gpus"], "GPU") if c.get("gpus") is not None else "",
             _many(c["cores"], "core") if c.get("cores") is not None else "",
             str(c["memory"]) if c.get("memory") else ""]
    return ", ".join(p for p in parts if p) or "-"


def _scope(value: str) -> str:
    value = value.strip()
    kind, sep, rest = value.partition(":")
    if not sep or kind not in SCOPE_KINDS or not rest:
        raise ValueError("Scope: write org:NAME, team:ORG/TEAM or project:PATH")
    return value


class QuotasView(TableView):
    title = "Quotas"
    watches = ("quotas",)
    columns = ("scope", "limit", "guaranteed", "holds")

    def caption_text(self) -> Any:
        return ["Capacity quotas: the most each may hold, what it keeps, what it holds now",
                ("dim", " · A adds one · llmgw ctl quotas, quota …")]

    def rows(self) -> list[Row]:
        rows = []
        for q in self.model.data("quotas", []):
            held = q.get("held")
            holds = (f"{_many(held['gpus'], 'GPU')}, {_many(held['cores'], 'core')}, {gib(held['memory_bytes'])}"
                     if held else "-")
            rows.append(Row(q["scope"], (q["scope"], _capacity(q["limit"]), _capacity(q["guaranteed"]), holds)))
        return rows

    def row_actions(self, row: Row) -> list[Action]:
        quota = next((q for q in self.model.data("quotas", []) if q["scope"] == row.key), None)
        return [("Change…", lambda: self.edit(quota)), ("Remove…", lambda: self.remove(row.key))]

    def remove(self, scope: str) -> None:
        self.app.ask([f"Take {scope}'s capacity quota away?"],
                     lambda: self.app.run(self.actions.remove_quota(scope),
                                          lambda q: self.app.note(f"{scope}: no quota")))

    def add(self) -> None:
        self.edit(None)

    def edit(self, quota: dict[str, Any] | None) -> None:
        limit = (quota or {}).get("limit") or {}
        kept = (quota or {}).get("guaranteed") or {}
        fields: list[Any] = []
        if quota is None:
            fields.append(TextField("scope", "Scope", "", _scope, hint="org:NAME, team:ORG/TEAM or project:PATH"))
        fields += [
            TextField("gpus", "Most GPUs", limit.get("gpus"), whole("Most GPUs", blank=True), hint="empty: no limit"),
            TextField("cores", "Most cores", limit.get("cores"), whole("Most cores", blank=True)),
            TextField("memory", "Most memory", limit.get("memory"), size("Most memory"), hint="like 512GiB"),
            TextField("g_gpus", "Kept GPUs", kept.get("gpus"), whole("Kept GPUs", blank=True),
                      hint="what it keeps when others want it"),
            TextField("g_cores", "Kept cores", kept.get("cores"), whole("Kept cores", blank=True)),
            TextField("g_memory", "Kept memory", kept.get("memory"), size("Kept memory"))]

        def check(v: dict[str, Any]) -> list[str]:
            return [f"Kept {what}: {v['g_' + key]} is more than the most ({v[key]})"
                    for key, what in (("gpus", "GPUs"), ("cores", "cores"))
                    if v[key] is not None and v["g_" + key] is not None and v["g_" + key] > v[key]]

        def send(v: dict[str, Any]):
            scope = quota["scope"] if quota else v["scope"]
            return self.actions.set_quota({
                "scope": scope,
                "limit": {k: v[k] for k in ("gpus", "cores", "memory") if v[k] is not None},
                "guaranteed": {k: v["g_" + k] for k in ("gpus", "cores", "memory") if v["g_" + k] is not None}})

        title = f"Quota of {quota['scope']}" if quota else "Add a capacity quota"
        self.app.form(title, fields, send, done=lambda q: self.app.note(f"{q['scope']}: quota set"), check=check,
                      intro=["Replaces the scope's quota. `llmgw ctl quota set` does the same."])
