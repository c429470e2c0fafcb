"""Settings: server.yaml as a tree of menus from the configuration reference.

Every key of the file, with the value set (or the default that applies),
its type and what it is for. The cluster's keys (the settings kept in the
store) are changed there at once, as `llmgw ctl config` does; this machine's
keys are changed here and written to its server.yaml together when S saves,
keeping the file's comments, as `llmgw ctl server-config` does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import urwid

from llmgw.config.errors import format_path
from llmgw.config.schema import parse_path
from llmgw.console.model.settings_tree import (
    Pending,
    SettingsNode,
    build_tree,
    check_value,
    editable_text,
    shown,
)
from llmgw.console.views.base import View, when
from llmgw.console.widgets import ChoiceField, Row, Table, TextField

__all__ = ["NOTE", "SettingsView"]

NOTE = ("Every key of server.yaml, from the configuration reference. Keys marked cluster are saved at once to "
        "the cluster's settings in the store, for every control plane (`llmgw ctl config`); the others are this "
        "machine's and wait until S saves them to its server.yaml, keeping the file's comments (`llmgw ctl "
        "server-config`).")

#: How each source is said in the table.
SOURCES = {"default": "default", "server.yaml": "server.yaml", "store": "store", "unsaved": "not saved",
           "removed": "removed, not saved"}


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


class SettingsView(View):
    title = "server.yaml"
    watches = ("server-config",)
    contexts = ("settings", "panel")

    def build(self) -> urwid.Widget:
        self.path = ""
        self.pending = Pending()
        self.tree = SettingsNode(path="", name="server.yaml", kind="root")
        self.crumbs = urwid.Text("")
        self.table = Table(("key", "value", "type", "from", "note"))
        self.detail = urwid.Text("")
        urwid.connect_signal(self.table.walker, "modified", self._describe)
        header = urwid.Pile([urwid.AttrMap(urwid.Text(NOTE), "dim"), urwid.Divider(),
                             urwid.AttrMap(self.crumbs, "title"), urwid.Divider()])
        footer = urwid.Pile([urwid.Divider("─"), self.detail])
        return urwid.Frame(self.table, header=header, footer=footer)

    @property
    def answer(self) -> dict[str, Any]:
        return self.model.data("server-config", {})

    # ---- showing

    def refresh(self) -> None:
        if self._widget is None:
            return
        missing = self.unread()
        if missing:
            self.table.set_rows([], empty=missing)
            return
        self.tree = build_tree(self.answer, self.pending)
        node = self.tree.find(self.path) or self.tree
        self.path = node.path
        where = " › ".join(["server.yaml", *self._crumbs(node)])
        said = [where]
        if self.answer.get("path"):
            said.append(f"  ({self.answer['path']})")
        if not self.answer.get("editable", True):
            said.append(("error", f"\nserver.yaml cannot be changed here: {self.answer.get('reason')}"))
        elif self.answer.get("file_problems"):
            said.append(("error", "\n" + "\n".join(self.answer["file_problems"])))
        if self.pending:
            said.append(("warn", f"\n{_plural(len(self.pending), 'change', 'changes')} not saved: S saves them"))
        self.crumbs.set_text(said)
        self.table.set_rows([self._row(child) for child in node.children],
                            empty="(no entries: A adds one)" if node.kind in ("blocks", "block-map") else "(none)")
        self._describe()

    def _crumbs(self, node: SettingsNode) -> list[str]:
        names = []
        while node is not None and node.path:
            names.append(node.name)
            parent = self._parent(node.path)
            node = self.tree.find(parent) if parent else None  # type: ignore[assignment]
        return names[::-1]

    @staticmethod
    def _parent(path: str) -> str:
        parts = parse_path(path)
        return format_path(parts[:-1]) if len(parts) > 1 else ""

    def _row(self, node: SettingsNode) -> Row:
        spec = node.spec or {}
        source = SOURCES.get(node.source, node.source)
        if node.source == "store":
            source = f"store · {spec.get('store_actor') or '?'}"
        notes = []
        if node.cluster:
            notes.append("cluster")
        if spec.get("restart_pending"):
            notes.append("restart to apply")
        elif not node.is_menu and not node.cluster and not node.in_entry and spec.get("applies") == "restart" \
                and node.source == "unsaved":
            notes.append("restart")
        attr = {"unsaved": "warn", "removed": "error", "store": "good", "default": "dim"}.get(node.source)
        if node.is_menu:
            if node.kind in ("blocks", "block-map"):
                value = _plural(node.entries, "entry", "entries")
            elif node.kind == "entry":
                value = ""
            else:
                value = f"{node.set_count()} set" if node.set_count() else ""
            name = f"{node.name} ›"
            kind = {"entry": "entry", "section": "section"}.get(node.kind, spec.get("type", node.kind))
            return Row(node.path, (name, value, kind, source if node.kind == "entry" or node.source not in
                                   ("default", "server.yaml") else "", ", ".join(notes)),
                       attr if node.source in ("unsaved", "removed") else "heading")
        value = shown(node.value)
        if node.kind == "secret" and node.value not in (None, ""):
            value = "*** (hidden)" if node.source != "default" else value
        return Row(node.path, (node.name, value, spec.get("type", node.kind) if node.kind != "any" else "block",
                               source, ", ".join(notes)), attr)

    def _focused(self) -> SettingsNode | None:
        row = self.table.focused if self._widget is not None else None
        return self.tree.find(row.key) if row is not None else None

    def _describe(self, *_: Any) -> None:
        node = self._focused()
        if node is None:
            self.detail.set_text("")
            return
        spec = node.spec or {}
        lines: list[Any] = [("title", node.path), f": {node.doc or spec.get('doc') or 'a section of server.yaml'}"]
        if node.is_menu:
            if node.kind in ("blocks", "block-map"):
                lines.append("\nEnter opens it; A adds an entry.")
            elif node.kind == "entry":
                lines.append("\nEnter opens it; D removes it.")
            self.detail.set_text(lines)
            return
        facts = [spec.get("type", node.kind) + (f" ({', '.join(spec['choices'])})" if spec.get("choices") else "")]
        if not node.in_entry or node.kind != "any":
            facts.append(f"default {shown(spec.get('default'))}" if spec.get("default") is not None
                         else ("required" if spec.get("required") else "no default"))
        if spec.get("secret_from"):
            facts.append(f"read from {spec['secret_from']}")
        if node.cluster:
            facts.append("a cluster setting: Enter saves it to the store at once, for every control plane")
            if spec.get("store_value") is not None:
                facts.append(f"set there by {spec.get('store_actor') or '?'} at {when(spec.get('store_updated_at'))}"
                             f" (U puts server.yaml's back)")
        elif spec.get("applies") == "live" and not node.in_entry:
            facts.append("taken up at once when saved")
        else:
            facts.append("takes effect when llmgw server restarts")
        if spec.get("restart_pending"):
            facts.append(f"this server runs {shown(spec.get('value'))} until then")
        lines.append("\n" + "; ".join(facts))
        self.detail.set_text(lines)

    # ---- keys

    def commands(self) -> dict[str, Callable[[], None]]:
        self.widget  # noqa: B018
        node = self._focused()
        here = self.tree.find(self.path) or self.tree
        found: dict[str, Callable[[], None]] = {}
        if node is not None:
            if node.source != "removed":
                found["act"] = self.act
            if node.kind == "entry" or self._holder_kind(node) == "block-map":
                if node.source != "removed":
                    found["remove"] = self.remove
            elif node.path in self.pending or node.source in ("server.yaml", "store") or \
                    (node.is_menu and node.set_count()):
                found["unset"] = self.unset
        if here.kind in ("blocks", "block-map") and here.source != "removed":
            found["add"] = self.add
        if self.pending:
            found["save"] = self.save
        return found

    def _holder_kind(self, node: SettingsNode) -> str:
        holder = self.tree.find(self._parent(node.path))
        return holder.kind if holder is not None else ""

    def back(self) -> bool:
        if not self.path:
            return False
        came_from = self.path
        self.path = self._parent(came_from)
        self.refresh()
        self.table.focus_key(came_from)
        return True

    def act(self) -> None:
        node = self._focused()
        if node is None or node.source == "removed":
            return
        if node.is_menu:
            self.path = node.path
            self.refresh()
            self.table.listbox.set_focus(0) if self.table.walker.rows else None
            self.app.update_lines()
            return
        self.edit(node)

    # ---- changing one key

    def _field(self, node: SettingsNode) -> Any:
        spec = node.spec or {}
        kind = node.kind
        if kind == "boolean":
            return ChoiceField("value", "Value", ["true", "false"], node.value, values=[True, False])
        if kind == "choice":
            return ChoiceField("value", "Value", spec.get("choices") or [], node.value)
        hints = {"duration": "a duration like 30s, 5m or 1h30m", "size": "a size like 128MiB or 1GiB",
                 "integer": "a whole number", "number": "a number", "list": "items between commas: a, b",
                 "map": "a mapping on one line: {name: value}", "any": "YAML on one line: {key: value, list: [a]}",
                 "secret": "the secret, env:NAME or file:/path; the one set is not shown",
                 "text": "text (empty is allowed)"}
        hint = hints.get(kind, kind)
        if spec.get("nullable"):
            hint += "; empty for none"
        return TextField("value", "Value", editable_text(node.value, kind),
                         lambda text: check_value(node.path, text, kind, nullable=bool(spec.get("nullable"))),
                         hint=hint)

    def edit(self, node: SettingsNode) -> None:
        spec = node.spec or {}
        field = self._field(node)
        intro = [node.doc or spec.get("doc", ""), ""]
        if node.cluster:
            intro.insert(1, "A cluster setting: Save keeps it in the store, for every control plane.")

            def done(info: dict[str, Any]) -> None:
                self.app.note(f"{info['key']} = {shown(info['value'])} (set by {info.get('actor') or '?'})")

            self.app.form(f"Set {node.path}", [field], lambda v: self.actions.set_setting(node.path, v["value"]),
                          done=done, intro=intro, apply_label="Save")
            return

        def keep(values: dict[str, Any]) -> str:
            self.stage(node, values["value"])
            return node.path

        def kept(path: str) -> None:
            self.refresh()
            self.app.note(f"{path}: changed here; S saves it to server.yaml")

        self.app.form(f"Change {node.path}", [field], keep, done=kept, intro=intro, apply_label="Keep")

    def stage(self, node: SettingsNode, value: Any) -> None:
        """Keep a change to save later. Inside a list the file does not set (the default bands), the whole
        list is set, with the change in it: the file has no entries to change one of."""
        parts = parse_path(node.path)
        for depth in range(1, len(parts)):
            holder = self.tree.find(format_path(parts[:depth]))
            if holder is not None and holder.kind in ("blocks", "block-map") and holder.source == "default":
                whole = copy.deepcopy(holder.value) if holder.value is not None else []
                _put_in(whole, parts[depth:], value)
                self.pending.set(holder.path, whole)
                return
        self.pending.set(node.path, value)

    # ---- taking out, adding, saving

    def unset(self) -> None:
        node = self._focused()
        if node is None:
            return
        if self.pending.drop(node.path):
            self.refresh()
            self.app.note(f"{node.path}: the change made here is dropped")
            return
        if node.cluster and (node.spec or {}).get("store_value") is not None:
            key = node.path
            self.app.run(self.actions.unset_setting(key),
                         lambda info: self.app.note(f"{key}: back to server.yaml's, {shown(info['value'])}"))
            return
        if node.source == "default" and not node.set_count():
            self.app.note(f"{node.path} is at its default already")
            return
        self.pending.remove(node.path)
        self.refresh()
        self.app.note(f"{node.path}: back to its default when S saves")

    def remove(self) -> None:
        node = self._focused()
        if node is None:
            return
        holder = self.tree.find(self._parent(node.path))
        last = parse_path(node.path)[-1]
        whole = holder is not None and (holder.source == "default" or holder.path in self.pending)
        if node.added and not whole:
            if isinstance(last, int):
                self.pending.drop_added(self._parent(node.path), last)
            else:
                self.pending.drop_under(node.path)
            self.refresh()
            self.app.note(f"{node.path}: the entry added here is dropped")
            return

        def go() -> None:
            if whole:
                # The list is set as a whole (the default bands, or one changed here): set it without the entry.
                value = copy.deepcopy(holder.value)
                if isinstance(value, list) and isinstance(last, int) and last < len(value):
                    del value[last]
                elif isinstance(value, dict):
                    value.pop(last, None)
                self.pending.set(holder.path, value)
            else:
                self.pending.remove(node.path)
            self.refresh()
            self.app.note(f"{node.path}: removed when S saves")

        self.app.ask([f"Remove {node.path} ({node.name}) from server.yaml?",
                      "It goes when S saves the changes; until then U on it keeps it."], go)

    def add(self) -> None:
        here = self.tree.find(self.path)
        if here is None:
            return
        spec = here.spec or {}
        if here.kind == "block-map":
            fields = [TextField("name", "Name", "", _name(here)),
                      TextField("value", "Value", "{}", lambda t: check_value(here.path, t, "any"),
                                hint="YAML on one line: {input: {detectors: [pii]}}")]

            def keep_named(values: dict[str, Any]) -> str:
                path = format_path((*parse_path(here.path), values["name"]))
                self.pending.set(path, values["value"] if values["value"] is not None else {})
                return path

            self.app.form(f"Add to {here.path}", fields, keep_named, done=self._added, intro=[spec.get("doc", ""), ""],
                          apply_label="Keep")
            return
        template = spec["key"] + "[]."
        required = [k for k in self.answer.get("keys", []) if k["key"].startswith(template)
                    and "." not in k["key"][len(template):] and k.get("required")]
        index = len(here.children)
        path = f"{here.path}[{index}]"
        if not required:
            self.stage_entry(here, path, {})
            self._added(path)
            return
        fields = [TextField(k["key"][len(template):], k["key"][len(template):].capitalize(), "",
                            _required(k)) for k in required]
        self.app.form(f"Add to {here.path}", fields, lambda v: self.stage_entry(here, path, v), done=self._added,
                      intro=[spec.get("doc", ""), "The other keys of the entry are changed once it is added."],
                      apply_label="Keep")

    def stage_entry(self, holder: SettingsNode, path: str, values: dict[str, Any]) -> str:
        if holder.source == "default":  # a list the file does not set: the default's entries come with it
            whole = copy.deepcopy(holder.value or [])
            whole.append(dict(values))
            self.pending.set(holder.path, whole)
        else:
            self.pending.set(path, dict(values))
        return path

    def _added(self, path: str) -> None:
        self.refresh()
        self.table.focus_key(path)
        self._describe()
        self.app.note(f"{path}: added here; Enter changes its keys, S saves it to server.yaml")

    def save(self) -> None:
        if not self.pending:
            self.app.note("nothing to save")
            return
        body = self.pending.body()

        def saved(answer: dict[str, Any]) -> None:
            self.pending.clear()
            self.refresh()
            lines = [answer["message"], ""]
            for c in answer["changed"]:
                after = "its default" if c["after"] is None else shown(c["after"])
                lines.append(f"{c['key']}: {shown(c['before'])} → {after} ({c['takes_effect']})")
            self.app.show("Saved", lines)

        self.app.run(self.actions.save_server_config(body), saved, busy="saving…")


def _put_in(document: Any, parts: tuple, value: Any) -> None:
    node = document
    for part in parts[:-1]:
        node = node[part] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = value


def _name(holder: SettingsNode) -> Callable[[str], str]:
    taken = {child.name for child in holder.children}

    def parse(text: str) -> str:
        text = text.strip()
        if not text:
            raise ValueError("Name: give one")
        if text in taken:
            raise ValueError(f"Name: {holder.path} has {text} already")
        return text

    return parse


def _required(spec: dict[str, Any]) -> Callable[[str], Any]:
    key = spec["key"]

    def parse(text: str) -> Any:
        if not text.strip():
            raise ValueError(f"{key.rsplit('.', 1)[-1]}: every entry needs one")
        return check_value(key, text, spec["kind"])

    return parse

