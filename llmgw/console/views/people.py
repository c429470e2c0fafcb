"""People: Accounts, API keys (a new key is shown once), and the Audit log."""

from __future__ import annotations

import json
from typing import Any

from llmgw.console.views.base import Action, TableView, ago, when
from llmgw.console.views.orgs import clear_limits, limits_form
from llmgw.console.widgets import ChoiceField, Row, TextField
from llmgw.console.widgets.form import duration, text

__all__ = ["AccountsView", "AuditView", "KeysView", "secret_lines"]

STAFF_ROLES = ("none", "viewer", "operator", "billing", "admin")


def _email(value: str) -> str:
    value = value.strip().lower()
    if "@" not in value or value.startswith("@") or value.endswith("@"):
        raise ValueError(f"Email: {value!r} is not an email address")
    return value


class AccountsView(TableView):
    title = "Accounts"
    watches = ("users",)
    columns = ("email", "name", "staff", "state", "password", "since")

    def caption_text(self) -> Any:
        users = self.model.data("users", [])
        pending = sum(1 for u in users if u["state"] == "pending")
        return [f"Accounts: {len(users)}" + (f", {pending} waiting for approval" if pending else ""),
                ("dim", " · A adds one · llmgw ctl users")]

    def rows(self) -> list[Row]:
        return [Row(u["id"], (u["email"], u["name"], u["role"], u["state"], "yes" if u["has_password"] else "no",
                              when(u["created_at"])[:10]), None if u["state"] == "active" else "warn")
                for u in self.model.data("users", [])]

    def _user(self, uid: str) -> dict[str, Any] | None:
        return next((u for u in self.model.data("users", []) if u["id"] == uid), None)

    def row_title(self, row: Row) -> str:
        u = self._user(row.key)
        return u["email"] if u else str(row.key)

    def row_actions(self, row: Row) -> list[Action]:
        u = self._user(row.key)
        if u is None:
            return []
        email = u["email"]
        actions: list[Action] = [("Details", lambda: self.details(email))]
        if u["state"] == "pending":
            actions.append(("Approve", lambda: self.state(email, "active", "approved")))
        elif u["state"] == "active":
            actions.append(("Suspend… (their keys stop working)", lambda: self.suspend(email)))
        else:
            actions.append(("Reinstate", lambda: self.state(email, "active", "reinstated")))
        actions += [("Staff role…", lambda: self.role(u)),
                    ("Add to an organization, team or project…", lambda: self.add_member(email)),
                    ("Take out of an organization, team or project…", lambda: self.remove_member(email)),
                    ("Limits…", lambda: limits_form(self.app, f"user:{email}")),
                    ("Remove their limits…", lambda: clear_limits(self.app, f"user:{email}"))]
        return actions

    def details(self, email: str) -> None:
        def shown(d: dict[str, Any]) -> None:
            u = d["user"]
            lines: list[Any] = [("title", f"{u['name']} <{u['email']}>"), (f"id {u['id']}, {u['state']}, staff role "
                                f"{u['role']}, password {'set' if u['has_password'] else 'none (single sign-on)'}"),
                                f"since {when(u['created_at'])}", ""]
            lines += [f"{m['role']} of {m['scope_kind']} {m['path']}" for m in d["memberships"]] or ["in nothing yet"]
            self.app.show(f"Account {email}", lines)

        self.app.run(self.actions.user(email), shown, busy="reading…")

    def state(self, email: str, state: str, said: str) -> None:
        self.app.run(self.actions.user_state(email, state), lambda u: self.app.note(f"{u['email']}: {said}"))

    def suspend(self, email: str) -> None:
        self.app.ask([f"Suspend {email}?", "Their keys stop working until they are reinstated."],
                     lambda: self.state(email, "suspended", "suspended"))

    def role(self, u: dict[str, Any]) -> None:
        self.app.form(f"Staff role of {u['email']}", [ChoiceField("role", "Role", list(STAFF_ROLES), u["role"])],
                      lambda v: self.actions.user_role(u["email"], v["role"]),
                      done=lambda u2: self.app.note(f"{u2['email']}: {u2['role']}"),
                      intro=[("viewer looks, operator runs the cluster, billing sees usage and quotas, admin does "
                             "anything.")])

    def add_member(self, email: str) -> None:
        self.app.form(f"Add {email} to…", [
            TextField("path", "Path", "", text("Path", required=True), hint="acme, acme/search or acme/search/web"),
            ChoiceField("role", "As", ["member", "owner"])],
            lambda v: self.actions.add_member(email, v["path"], v["role"]),
            done=lambda m: self.app.note(f"{email}: {m['role']} of {m['path']}"), apply_label="Add")

    def remove_member(self, email: str) -> None:
        self.app.form(f"Take {email} out of…",
                      [TextField("path", "Path", "", text("Path", required=True))],
                      lambda v: self.actions.remove_member(email, v["path"]),
                      done=lambda d: self.app.note(d["done"]),
                      confirm=lambda v: [f"Take {email} out of {v['path']}?"], apply_label="Take out")

    def add(self) -> None:
        self.app.form("Add an account", [
            TextField("email", "Email", "", _email),
            TextField("name", "Name", "", text("Name"), hint="empty: the email's first part"),
            ChoiceField("role", "Staff role", list(STAFF_ROLES)),
            ChoiceField("state", "State", ["active", "pending"], hint="active: already approved")],
            lambda v: self.actions.create_user({**v, "name": v["name"] or ""}),
            done=lambda u: self.app.note(f"{u['email']}: added, {u['state']}"),
            intro=["`llmgw ctl users create` does the same."], apply_label="Add")


def secret_lines(issued: dict[str, Any]) -> list[Any]:
    """The dialog of a key just made: its secret, this once."""
    key = issued["key"]
    return ["The key, shown this once and never again:", "", ("secret", f" {issued['secret']} "), "",
            f"{key['id']} ({key['kind']}), prefix {key['prefix']}"
            + (f", ends {when(key['expires_at'])}" if key.get("expires_at") else ""),
            ("dim", "Copy it now: llmgw keeps only its hash, so no one can show it again.")]


class KeysView(TableView):
    title = "API keys"
    watches = ("keys", "orgs", "users")
    needs = ("keys",)
    columns = ("key", "prefix", "name", "kind", "state", "project", "owner", "last used")

    def caption_text(self) -> Any:
        keys = self.model.data("keys", [])
        active = sum(1 for k in keys if k["state"] == "active")
        return [f"API keys: {active} active of {len(keys)}", ("dim", " · A issues one · llmgw ctl keys")]

    def rows(self) -> list[Row]:
        paths = {n["id"]: n["path"] for n in self.model.data("orgs", {}).get("nodes", [])}
        emails = {u["id"]: u["email"] for u in self.model.data("users", [])}
        return [Row(k["id"], (k["id"], k["prefix"], k["name"] or "-", k["kind"], k["state"],
                              paths.get(k["project_id"], k["project_id"] or "-"),
                              emails.get(k["user_id"], k["user_id"] or "-"), ago(k["last_used_at"])),
                    None if k["state"] == "active" else "dim")
                for k in self.model.data("keys", [])]

    def _key(self, kid: str) -> dict[str, Any] | None:
        return next((k for k in self.model.data("keys", []) if k["id"] == kid), None)

    def row_actions(self, row: Row) -> list[Action]:
        k = self._key(row.key)
        if k is None:
            return []
        actions: list[Action] = [("Details", lambda: self.app.show(f"Key {k['id']}", _key_lines(k)))]
        if k["state"] == "active":
            actions += [("Limits…", lambda: limits_form(self.app, f"key:{k['id']}")),
                        ("Rotate…", lambda: self.rotate(k)),
                        ("Revoke…", lambda: self.revoke(k))]
        return actions

    def add(self) -> None:
        def check(v: dict[str, Any]) -> list[str]:
            return [] if v["project"] or v["user"] else ["Give a project, a person, or both."]

        self.app.form("Issue a key", [
            TextField("project", "Project", "", text("Project"), hint="its path, like acme/search/web"),
            TextField("user", "Person", "", text("Person"), hint="an email; with a project, a member's key"),
            TextField("name", "Name", "", text("Name")),
            TextField("ttl", "Lives for", "", duration("Lives for", blank=True), hint="like 90d; empty: until revoked"),
            TextField("band", "Band", "", text("Band"), hint="its priority band; empty: the default")],
            lambda v: self.actions.issue_key({**v, "name": v["name"] or ""}),
            done=lambda issued: self.app.show("A new key", secret_lines(issued)), check=check,
            intro=["`llmgw ctl keys create` does the same."], apply_label="Issue")

    def rotate(self, k: dict[str, Any]) -> None:
        self.app.form(f"Rotate {k['id']}", [
            TextField("overlap", "Old key works for", "24h", duration("Old key works for"), hint="0s stops it now")],
            lambda v: self.actions.rotate_key(k["id"], v["overlap"]),
            done=lambda r: self.app.show("The new key", [*secret_lines(r["new"]), "",
                                                         f"{r['old']['id']} stops at {when(r['old']['revoked_at'])}."]),
            confirm=lambda v: [f"Rotate {k['id']}? The old key stops working after {v['overlap']}."],
            intro=["A new key with the same project, owner and limits."], apply_label="Rotate")

    def revoke(self, k: dict[str, Any]) -> None:
        self.app.ask([f"Revoke {k['id']} ({k['prefix']}…)?", "It stops working at once, for good."],
                     lambda: self.app.run(self.actions.revoke_key(k["id"]),
                                          lambda k2: self.app.note(f"{k2['id']}: {k2['state']}")))


def _key_lines(k: dict[str, Any]) -> list[str]:
    return [f"{k['id']}: {k['state']}, {k['kind']}, prefix {k['prefix']}", f"name {k['name'] or '-'}",
            f"project {k['project_id'] or '-'}, owner {k['user_id'] or '-'}", f"band {k['band'] or 'the default'}",
            "models " + (", ".join(k["models"]) if k["models"] is not None else "whatever its limits allow"),
            f"made {when(k['created_at'])}, expires {when(k['expires_at'])}, revoked {when(k['revoked_at'])}",
            f"last used {ago(k['last_used_at'])}"]


class AuditView(TableView):
    title = "Audit"
    watches = ("audit",)
    columns = ("at", "actor", "via", "action", "target", "outcome")

    def caption_text(self) -> Any:
        return ["Audit: every change of the last week, newest first", ("dim", " · Enter shows one · llmgw ctl audit")]

    def rows(self) -> list[Row]:
        return [Row(e["id"], (when(e["at"]), e["actor"], e["via"] or "-", e["action"], e["target"],
                              e["outcome"] or "-"), "error" if e["outcome"] == "refused" else None)
                for e in self.model.data("audit", [])]

    def row_actions(self, row: Row) -> list[Action]:
        e = next((e for e in self.model.data("audit", []) if e["id"] == row.key), None)
        return [] if e is None else [("Details", lambda: self.app.show(f"Change {e['id']}", audit_lines(e)))]

    def act(self) -> None:  # one thing to do: show it
        row = self.table.focused
        actions = self.row_actions(row) if row is not None else []
        if actions:
            actions[0][1]()


def audit_lines(e: dict[str, Any]) -> list[Any]:
    lines: list[Any] = [("title", f"{e['action']} {e['target']}"), (f"at {when(e['at'])} by {e['actor']} through "
                        f"{e['via'] or 'api'}: {e['outcome'] or '-'}")]
    if e.get("reason"):
        lines.append(("error", f"refused: {e['reason']}"))
    if e.get("detail"):
        lines += ["", ("dim", "The fields given (secrets taken out):"),
                  *json.dumps(e["detail"], indent=2, sort_keys=True, default=str).splitlines()]
    return lines
