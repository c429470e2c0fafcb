"""Settings: the cluster's settings as a tree of menus, changed and unset through the admin API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urwid

from llmgw.console.model.settings_tree import SettingsNode, build_tree, check_value
from llmgw.console.views.base import View, when
from llmgw.console.widgets import ChoiceField, Row, Table, TextField

__all__ = ["SettingsView"]

NOTE = ("Cluster settings: kept in the store, in force on every control plane within seconds "
        "(`llmgw ctl config` does the same). This machine's own server.yaml — listeners, certificates, the "
        "store's address — is not edited here yet: change the file, `llmgw config check` it; editing it from "
        "the console comes in a later release.")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "-" if value is None else str(value)


def _count(n: int) -> str:
    return f"{n} setting" + ("" if n == 1 else "s")


class SettingsView(View):
    title = "Cluster settings"
    watches = ("settings",)
    contexts = ("settings", "panel")

    def build(self) -> urwid.Widget:
        self.path = ""
        self.tree = SettingsNode(path="", name="Settings")
        self.crumbs = urwid.Text("")
        self.table = Table(("name", "value", "from", "set by"))
        self.detail = urwid.Text("")
        urwid.connect_signal(self.table.walker, "modified", self._describe)
        header = urwid.Pile([urwid.AttrMap(urwid.Text(NOTE), "dim"), urwid.Divider(),
                             urwid.AttrMap(self.crumbs, "title"), urwid.Divider()])
        footer = urwid.Pile([urwid.Divider("─"), self.detail])
        return urwid.Frame(self.table, header=header, footer=footer)

    def refresh(self) -> None:
        if self._widget is None:
            return
        missing = self.unread()
        if missing:
            self.table.set_rows([], empty=missing)
            return
        self.tree = build_tree(self.model.data("settings", []))
        node = self.tree.find(self.path) or self.tree
        self.path = node.path
        self.crumbs.set_text(" › ".join(["Settings", *node.path.split(".")]) if node.path else "Settings")
        rows = []
        for child in node.children:
            if child.is_leaf:
                s = child.setting or {}
                rows.append(Row(child.path, (child.name, _shown(s["value"]),
                                             "set here" if s["source"] == "store" else "server.yaml",
                                             s.get("actor") or "-"), "good" if s["source"] == "store" else None))
            else:
                rows.append(Row(child.path, (child.name + " ›", _count(child.leaves()), "", ""), "heading"))
        self.table.set_rows(rows)
        self._describe()

    def _focused(self) -> SettingsNode | None:
        row = self.table.focused
        return self.tree.find(row.key) if row is not None else None

    def _describe(self, *_: Any) -> None:
        node = self._focused()
        if node is None:
            self.detail.set_text("")
            return
        if not node.is_leaf:
            self.detail.set_text([("title", node.path), f": {node.doc or 'a section of server.yaml'}"])
            return
        s = node.setting or {}
        kind = s["type"] + (f" ({', '.join(s['choices'])})" if s.get("choices") else "")
        lines: list[Any] = [("title", s["key"]), f": {s['doc']}\n", (f"type {kind}; server.yaml says "
                            f"{_shown(s['file_value'])}")]
        if s["source"] == "store":
            lines.append(f"; set here to {_shown(s['value'])} by {s.get('actor') or '?'} "
                         f"at {when(s.get('updated_at'))} (U puts server.yaml's back)")
        self.detail.set_text(lines)

    def commands(self) -> dict[str, Callable[[], None]]:
        self.widget  # noqa: B018
        node = self._focused()
        found: dict[str, Callable[[], None]] = {}
        if node is not None:
            found["act"] = self.act
            if node.is_leaf and (node.setting or {}).get("source") == "store":
                found["unset"] = self.unset
        return found

    def back(self) -> bool:
        if not self.path:
            return False
        came_from = self.path
        self.path = came_from.rpartition(".")[0]
        self.refresh()
        self.table.focus_key(came_from)
        return True

    def act(self) -> None:
        node = self._focused()
        if node is None:
            return
        if not node.is_leaf:
            self.path = node.path
            self.refresh()
            self.table.listbox.set_focus(0)
            self.app.update_lines()
            return
        self.edit(node.setting or {})

    def edit(self, s: dict[str, Any]) -> None:
        key, kind = s["key"], s["type"]
        if kind == "boolean":
            field: Any = ChoiceField("value", "Value", ["true", "false"], s["value"], values=[True, False])
        elif s.get("choices"):
            field = ChoiceField("value", "Value", s["choices"], s["value"])
        else:
            field = TextField("value", "Value", _shown(s["value"]), lambda text: check_value(key, text, kind),
                              hint=f"{kind}; server.yaml says {_shown(s['file_value'])}")

        def done(info: dict[str, Any]) -> None:
            self.app.note(f"{info['key']} = {_shown(info['value'])} (set by {info.get('actor') or '?'})")

        self.app.form(f"Set {key}", [field], lambda v: self.actions.set_setting(key, v["value"]), done=done,
                      intro=[s["doc"], ""], apply_label="Save")

    def unset(self) -> None:
        node = self._focused()
        if node is None or not node.is_leaf:
            return
        key = node.path
        self.app.run(self.actions.unset_setting(key),
                     lambda info: self.app.note(f"{key}: back to server.yaml's, {_shown(info['value'])}"))
