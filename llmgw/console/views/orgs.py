"""People: Organizations — the tree with each level's limits; and the limits form every scope shares."""

from __future__ import annotations

from typing import Any

from llmgw.console.model import scope_of
from llmgw.console.views.base import Action, TableView, money
from llmgw.console.widgets import ChoiceField, Row, TextField
from llmgw.console.widgets.form import text, whole

__all__ = ["OrgsView", "limits_form", "limits_text"]


def limits_text(limits: dict[str, Any] | None) -> str:
    if not limits:
        return "-"
    parts = []
    if limits.get("rpm") is not None:
        parts.append(f"{limits['rpm']} rpm")
    if limits.get("tpm") is not None:
        parts.append(f"{limits['tpm']} tpm")
    if limits.get("budget_micros") is not None:
        parts.append(f"{money(limits['budget_micros'])}/{limits.get('budget_period') or 'month'}")
    if limits.get("models") is not None:
        parts.append("models " + (", ".join(limits["models"]) or "none"))
    return ", ".join(parts) or "-"


def _money(what: str):
    from llmgw.accounting.prices import parse_money

    def parse(value: str) -> int | None:
        return parse_money(value, what) if value.strip() else None

    return parse


def _models(value: str) -> list[str] | None:
    names = [n.strip() for n in value.split(",") if n.strip()]
    return names or None


def limits_form(app: Any, scope: str) -> None:
    """Read the limits set on `scope`, then a form filled with them; only what changed is sent."""

    def opened(answer: dict[str, Any]) -> None:
        now = answer.get("limits") or {}
        shown_budget = money(now["budget_micros"]) if now.get("budget_micros") is not None else ""
        fields = [
            TextField("rpm", "Requests a minute", now.get("rpm"), whole("Requests a minute", minimum=1, blank=True),
                      hint="empty: no limit at this level"),
            TextField("tpm", "Tokens a minute", now.get("tpm"), whole("Tokens a minute", minimum=1, blank=True)),
            TextField("budget_micros", "Budget", shown_budget, _money("Budget"), hint="money per period, like 25.00"),
            ChoiceField("budget_period", "Per", ["month", "day"], now.get("budget_period") or "month"),
            TextField("models", "Models", ", ".join(now.get("models") or []), _models,
                      hint="the models allowed, by commas; empty: all its level above allows")]
        current = {"rpm": now.get("rpm"), "tpm": now.get("tpm"), "budget_micros": now.get("budget_micros"),
                   "budget_period": now.get("budget_period") or "month", "models": now.get("models")}

        def send(values: dict[str, Any]):
            body: dict[str, Any] = {k: v for k, v in values.items() if v != current[k]}
            if "budget_period" in body and values["budget_micros"] is None:
                del body["budget_period"]
            if not body:
                raise ValueError("Nothing changed; nothing was sent.")
            return app.actions.set_limits({"scope": scope, **body})

        app.form(f"Limits of {answer['scope']}", fields, send,
                 done=lambda info: app.note(f"{info['scope']}: {limits_text(info['limits'])}"),
                 intro=["Each level only narrows what is above it. `llmgw ctl limits set` does the same."])

    app.run(app.actions.limits(scope), opened, busy="reading…")


def clear_limits(app: Any, scope: str) -> None:
    app.ask([f"Remove every limit set on {scope}?", "What is set above it applies again."],
            lambda: app.run(app.actions.clear_limits(scope), lambda info: app.note(f"{scope}: no limits")))


class OrgsView(TableView):
    title = "Organizations"
    watches = ("orgs",)
    columns = ("name", "kind", "path", "limits")

    def caption_text(self) -> Any:
        nodes = self.model.data("orgs", {}).get("nodes", [])
        orgs = sum(1 for n in nodes if n["kind"] == "org")
        return [f"Organizations: {orgs}, with their teams and projects", ("dim", " · A adds one · llmgw ctl orgs")]

    def rows(self) -> list[Row]:
        tree = self.model.data("orgs", {})
        limits = tree.get("limits", {})
        rows = []
        for n in tree.get("nodes", []):
            depth = n["path"].count("/")
            name = "  " * depth + n["path"].rsplit("/", 1)[-1]
            rows.append(Row(n["id"], (name, n["kind"], n["path"], limits_text(limits.get(n["id"]))),
                            "heading" if n["kind"] == "org" else None))
        return rows

    def _node(self, node_id: str) -> dict[str, Any] | None:
        return next((n for n in self.model.data("orgs", {}).get("nodes", []) if n["id"] == node_id), None)

    def row_title(self, row: Row) -> str:
        node = self._node(row.key)
        return f"{node['kind']} {node['path']}" if node else str(row.key)

    def row_actions(self, row: Row) -> list[Action]:
        node = self._node(row.key)
        if node is None:
            return []
        scope = scope_of(node)
        actions: list[Action] = [("Limits…", lambda: limits_form(self.app, scope)),
                                 ("Remove its limits…", lambda: clear_limits(self.app, scope))]
        if node["kind"] != "project":
            actions.append(("Add a team or project inside…", lambda: self.add_inside(node)))
        actions.append(("Remove…", lambda: self.remove(node)))
        return actions

    def add(self) -> None:
        self.app.form("Add an organization",
                      [TextField("path", "Name", "", text("Name", required=True), hint="like acme")],
                      lambda v: self._create(v["path"], False, "org"),
                      intro=["`llmgw ctl orgs create NAME` does the same."], apply_label="Add")

    def add_inside(self, node: dict[str, Any]) -> None:
        kinds = ["team", "project"] if node["kind"] == "org" else ["project"]
        self.app.form(f"Add inside {node['path']}", [
            TextField("name", "Name", "", text("Name", required=True)),
            ChoiceField("kind", "Kind", kinds)],
            lambda v: self._create(f"{node['path']}/{v['name']}", v["kind"] == "project" and node["kind"] == "org",
                                   v["kind"]),
            apply_label="Add")

    def _create(self, path: str, project: bool, kind: str):
        if "/" in path.split("/")[-1] or not path.split("/")[-1]:
            raise ValueError("Name: one name, without /")
        call = self.actions.create_org(path, project)

        async def made() -> dict[str, Any]:
            node = await call
            self.app.note(f"{node['kind']} {node['path']}: made")
            return node

        return made()

    def remove(self, node: dict[str, Any]) -> None:
        self.app.ask([f"Remove the {node['kind']} {node['path']}?", "Only something empty can be removed."],
                     lambda: self.app.run(self.actions.remove_org(node["path"], node["kind"]),
                                          lambda n: self.app.note(f"{n['kind']} {n['path']}: removed")))
