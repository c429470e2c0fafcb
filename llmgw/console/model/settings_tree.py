"""server.yaml as a tree of menus: router › retries › attempts; models › [0] qwen-small › scaling › min.

The tree is built from what `GET /server-config` answers (every key of the
configuration reference, what the file sets, what runs) and the changes the
operator has made here and not saved yet (`Pending`). A list of sections
(models, admission.bands, notify.sinks) has one entry per item, named by the
item's name; a map of blocks (guard.policies) one per name. Nothing here
draws: the view turns nodes into rows.

Entries are named by their index as the file has them, and keep it until the
changes are saved: an entry taken away is marked, not dropped, so every
pending change still names what it meant (`PUT /server-config` reads them
the same way).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import attrs

from llmgw.config.errors import format_path
from llmgw.config.schema import MISSING, PathError, parse_path, plain_at, template_of
from llmgw.config.secrets import HIDDEN
from llmgw.config.units import ByteSize, Duration

__all__ = ["REMOVE", "Pending", "SettingsNode", "build_tree", "check_value", "shown"]


class _Remove:
    def __repr__(self) -> str:
        return "REMOVE"


#: A pending change that takes a key (or a list's entry) out of the file.
REMOVE: Any = _Remove()

#: What names an entry of a list, in this order of preference.
_ENTRY_NAMES = ("name", "url")


def shown(value: Any) -> str:
    """A value on one line, as YAML would write it: 30s, [openid, email], {mode: shadow}."""
    if value is None:
        return "-"
    if isinstance(value, str):  # on its own a text needs no quotes to be read
        return value or '""'
    return _flow(value)


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./@+-][A-Za-z0-9_./@+:* -]*")
_NOT_TEXT = re.compile(r"(?i)true|false|yes|no|on|off|null|~|[-+]?[0-9.]+(e[-+]?[0-9]+)?")


def _flow(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        if not value:
            return '""'
        plain = _PLAIN_WORD.fullmatch(value) and not _NOT_TEXT.fullmatch(value) and ": " not in value \
            and not value.endswith((":", " "))
        return value if plain else json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return str(value)


def _simple(value: Any) -> bool:
    """A list of plain words, written between commas: openid, email."""
    return all(isinstance(w, str) and w and not set(w) & set(',:[]{}"\'# ') for w in value)


class Pending:
    """Changes made here and not saved, in the order made: a path and its new value, or REMOVE."""

    def __init__(self) -> None:
        self.changes: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.changes)

    def __contains__(self, path: str) -> bool:
        return path in self.changes

    def get(self, path: str) -> Any:
        return self.changes.get(path, MISSING)

    def set(self, path: str, value: Any) -> None:
        self.changes.pop(path, None)  # moved to the end: made after what it may build on
        self.changes[path] = value

    def remove(self, path: str) -> None:
        """Take a key or an entry out: what was pending inside it goes."""
        self.drop_under(path)
        self.changes[path] = REMOVE

    def drop(self, path: str) -> bool:
        return self.changes.pop(path, MISSING) is not MISSING

    def drop_under(self, path: str) -> None:
        for key in list(self.changes):
            if key == path or key.startswith((path + ".", path + "[")):
                del self.changes[key]

    def drop_added(self, list_path: str, index: int) -> None:
        """Take back an entry added here: the ones added after it move up one."""
        self.drop_under(f"{list_path}[{index}]")
        base = parse_path(list_path)
        moved: dict[str, Any] = {}
        for key, value in self.changes.items():
            parts = parse_path(key)
            if parts[: len(base)] == base and len(parts) > len(base) and isinstance(parts[len(base)], int) \
                    and parts[len(base)] > index:
                parts = (*base, parts[len(base)] - 1, *parts[len(base) + 1:])
            moved[format_path(parts)] = value
        self.changes = moved

    def clear(self) -> None:
        self.changes.clear()

    def body(self) -> dict[str, Any]:
        """The PUT /server-config body: every set, then every unset."""
        return {"set": {k: v for k, v in self.changes.items() if v is not REMOVE},
                "unset": [k for k, v in self.changes.items() if v is REMOVE]}


@attrs.define
class SettingsNode:
    """A menu (a section, a list, an entry) or a key, at a path the file and the API use."""

    path: str  #: "" for the root; router.retries.attempts; models[0]; guard.policies["pii"]
    name: str
    kind: str  #: root, section, blocks, block-map, entry, or a value's kind (integer, duration, ...)
    doc: str = ""
    spec: dict[str, Any] | None = None  #: the key's description in the API's answer (an entry: its list's)
    children: list[SettingsNode] = attrs.Factory(list)
    value: Any = None  #: what applies: the change made here, the store's, the file's or the default
    source: str = "default"  #: default, server.yaml, store, unsaved, removed
    entries: int = 0  #: a list's or a map's entries, as they will be after the pending changes
    added: bool = False  #: an entry added here and not saved yet

    @property
    def is_menu(self) -> bool:
        return self.kind in ("root", "section", "blocks", "block-map", "entry")

    @property
    def cluster(self) -> bool:
        return bool(self.spec and self.spec.get("cluster"))

    @property
    def in_entry(self) -> bool:
        return "[" in self.path

    def find(self, path: str) -> SettingsNode | None:
        if self.path == path:
            return self
        for child in self.children:
            if path == child.path or path.startswith((child.path + ".", child.path + "[")):
                found = child.find(path)
                if found is not None:
                    return found
        return None

    def walk(self) -> Iterator[SettingsNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    def set_count(self) -> int:
        """Keys under this menu that are set (in the file, the store or here)."""
        return sum(1 for n in self.walk() if not n.is_menu and n.source != "default")


# ---------------------------------------------------------------- building


def _file_document(keys: list[dict[str, Any]]) -> dict[str, Any]:
    """The file as plain data (secrets as ***), put back together from the keys it sets."""
    document: dict[str, Any] = {}
    for k in keys:
        if "[]" in k["key"] or k["kind"] == "section" or not k.get("in_file"):
            continue
        node = document
        parts = parse_path(k["key"])
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(k["file_value"])
    return document


def _put(document: Any, parts: tuple, value: Any) -> None:
    """Set `value` at `parts` in plain data, making what is missing (a new entry at a list's end)."""
    node = document
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            while len(node) <= part:
                node.append({})
            if not isinstance(node[part], (dict, list)):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
    node[last] = copy.deepcopy(value)


def _take(document: Any, parts: tuple) -> None:
    parent = plain_at(document, parts[:-1]) if len(parts) > 1 else document
    if isinstance(parent, dict):
        parent.pop(parts[-1], None)


class _Builder:
    def __init__(self, answer: dict[str, Any], pending: Pending) -> None:
        self.keys = answer.get("keys", [])
        self.by_key = {k["key"]: k for k in self.keys}
        self.children_of: dict[str, list[dict[str, Any]]] = {}
        for k in self.keys:
            parent = k["key"].rsplit(".", 1)[0] if "." in k["key"] else ""
            if k["key"].endswith("[]"):
                continue
            self.children_of.setdefault(parent, []).append(k)
        self.file = _file_document(self.keys)
        self.defaults: dict[str, Any] = {}
        for k in self.keys:
            if "[]" not in k["key"] and k["kind"] != "section":
                _put(self.defaults, parse_path(k["key"]), k.get("default"))
        self.pending = pending
        self.effective = copy.deepcopy(self.file)
        self.removed: set[str] = set()
        for path, value in pending.changes.items():
            try:
                parts = parse_path(path)
            except PathError:
                continue
            if value is REMOVE:
                if isinstance(parts[-1], int) or self._is_entry_of_map(parts):
                    self.removed.add(path)  # shown as taken away until saved, so indexes keep their meaning
                else:
                    _take(self.effective, parts)
            else:
                _put(self.effective, parts, value)

    def _is_entry_of_map(self, parts: tuple) -> bool:
        spec = self.by_key.get(template_of(parts[:-1]))
        return bool(spec and spec["kind"] == "block-map")

    def _default(self, parts: tuple, spec: dict[str, Any] | None) -> Any:
        """What applies when nothing is set: the key's default, or its part of a list's default (bands)."""
        value = plain_at(self.defaults, parts)
        return (spec or {}).get("default") if value is MISSING else value

    def _source(self, path: str, parts: tuple, spec: dict[str, Any] | None) -> tuple[Any, str]:
        if any(path == r or path.startswith((r + ".", r + "[")) for r in self.removed):
            value = plain_at(self.effective, parts)
            return (None if value is MISSING else value), "removed"
        if path in self.pending:
            value = plain_at(self.effective, parts)
            return self._default(parts, spec) if value is MISSING else value, "unsaved"
        if spec and spec.get("cluster") and spec.get("store_value") is not None:
            return spec["store_value"], "store"
        value = plain_at(self.effective, parts)
        above = any(path.startswith((p + ".", p + "[")) for p in self.pending.changes)
        in_file = plain_at(self.file, parts)
        if value is not MISSING:
            return value, "unsaved" if above and value != in_file else "server.yaml"
        if above and in_file is not MISSING:  # taken out by a change to what holds it
            return self._default(parts, spec), "unsaved"
        return self._default(parts, spec), "default"

    def node(self, spec: dict[str, Any], parts: tuple) -> SettingsNode:
        path = format_path(parts)
        kind = spec["kind"]
        value, source = self._source(path, parts, spec)
        node = SettingsNode(path=path, name=str(parts[-1]), kind=kind, doc=spec.get("doc", ""), spec=spec,
                            value=value, source=source)
        if kind == "section":
            node.children = self.section(spec["key"], parts)
        elif kind == "blocks":
            node.children = self.entries(spec, parts, value if isinstance(value, list) else [],
                                         from_default=source == "default")
            node.entries = sum(1 for c in node.children if c.source != "removed")
        elif kind == "block-map":
            node.children = self.named(spec, parts, value if isinstance(value, dict) else {})
            node.entries = sum(1 for c in node.children if c.source != "removed")
        return node

    def section(self, template: str, parts: tuple) -> list[SettingsNode]:
        out = []
        for spec in self.children_of.get(template, []):
            name = spec["key"][len(template) + 1:] if template else spec["key"]
            out.append(self.node(spec, (*parts, name)))
        return out

    def entries(self, spec: dict[str, Any], parts: tuple, items: list[Any], *,
                from_default: bool = False) -> list[SettingsNode]:
        out = []
        on_file = plain_at(self.file, parts)
        on_file_count = len(on_file) if isinstance(on_file, list) else 0
        for i, item in enumerate(items):
            entry_parts = (*parts, i)
            path = format_path(entry_parts)
            label = next((str(item[n]) for n in _ENTRY_NAMES if isinstance(item, dict) and item.get(n)), "")
            removed = any(path == r or path.startswith(r + ".") for r in self.removed)
            added = not from_default and i >= on_file_count
            source = ("removed" if removed else "default" if from_default else "unsaved" if added
                      else "server.yaml")
            entry = SettingsNode(path=path, name=f"[{i}] {label}".rstrip(), kind="entry", doc=spec.get("doc", ""),
                                 spec=spec, value=item, source=source, added=added)
            entry.children = self.section(spec["key"] + "[]", entry_parts)
            out.append(entry)
        return out

    def named(self, spec: dict[str, Any], parts: tuple, items: dict[str, Any]) -> list[SettingsNode]:
        out = []
        on_file = plain_at(self.file, parts)
        for name, item in items.items():
            entry_parts = (*parts, name)
            path = format_path(entry_parts)
            source = ("removed" if path in self.removed else
                      "unsaved" if path in self.pending or not isinstance(on_file, dict) or name not in on_file
                      else "server.yaml")
            out.append(SettingsNode(path=path, name=name, kind="any", doc=spec.get("doc", ""), spec=spec,
                                    value=item, source=source, added=not isinstance(on_file, dict) or
                                    name not in on_file))
        return out


def build_tree(answer: dict[str, Any], pending: Pending | None = None) -> SettingsNode:
    """The menus for `GET /server-config`'s answer, with the changes not saved yet shown in place."""
    builder = _Builder(answer, pending or Pending())
    root = SettingsNode(path="", name="server.yaml", kind="root", doc="This control plane's configuration file.")
    root.children = builder.section("", ())
    return root


# ---------------------------------------------------------------- checking what is typed


def check_value(key: str, text: str, kind: str, *, nullable: bool = False) -> Any:
    """The value typed for `key` as the API takes it; ValueError saying what is wrong, before anything is sent.

    A cluster setting is also held to the registry's bounds; anything else
    the form cannot see (a maximum below a minimum) the control plane judges.
    """
    from llmgw.admin.errors import ApiError
    from llmgw.admin.settings import REGISTRY
    from llmgw.config.server import ServerConfig

    text = text.strip()
    if not text and nullable:
        return None
    value: Any
    if kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError(f"{key}: expected true or false, got {text!r}")
        value = text == "true"
    elif kind == "integer":
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{key}: expected a whole number, got {text!r}") from None
    elif kind == "number":
        try:
            value = float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {text!r}") from None
    elif kind == "duration":
        try:
            Duration.parse(text)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        value = text
    elif kind == "size":
        try:
            ByteSize.parse(text)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        value = int(text) if text.isdigit() else text
    elif kind == "secret":
        if not text:
            raise ValueError(f"{key}: give the secret, env:NAME or file:/path (U takes it out)")
        value = text
    elif kind in ("list", "map", "any"):
        value = _yaml_value(key, text, kind)
    else:
        value = text
    spec = REGISTRY.get(key)
    if spec is not None and kind in ("integer", "duration"):
        try:
            spec.parse(value, ServerConfig())
        except ApiError as exc:
            raise ValueError(exc.message) from None
    return value


def _yaml_value(key: str, text: str, kind: str) -> Any:
    """A list (`a, b` or `[a, b]`), a map (`{k: v}`) or anything, written as YAML on one line."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if kind == "list" and text and not text.startswith("["):
        return [part.strip() for part in text.split(",") if part.strip()]
    if not text:
        return [] if kind == "list" else {} if kind == "map" else None
    try:
        value = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise ValueError(f"{key}: not YAML: {str(exc).splitlines()[0]}") from None
    if kind == "list" and not isinstance(value, list):
        raise ValueError(f"{key}: expected a list like [a, b] or a, b")
    if kind == "map" and not isinstance(value, dict):
        raise ValueError(f"{key}: expected a mapping like {{name: value}}")
    return value


def editable_text(value: Any, kind: str) -> str:
    """A value as the form shows it for editing (a secret never: it is typed anew)."""
    if kind == "secret" or value is None or value == HIDDEN:
        return ""
    if kind == "list" and isinstance(value, list) and _simple(value):
        return ", ".join(value)
    if isinstance(value, (dict, list)):
        return shown(value)
    return shown(value) if not isinstance(value, str) else value
