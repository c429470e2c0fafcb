"""The cluster settings as a tree of menus: router › retries › attempts.

The leaves are what `GET /settings` answers (the registry in
`llmgw.admin.settings`); the sections between them are named and described
by server.yaml's own classes, as the configuration reference is, so a menu
says what a section is for in the reference's words.
"""

from __future__ import annotations

from typing import Any

import attrs

from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.server import ServerConfig

__all__ = ["SettingsNode", "build_tree", "check_value"]


@attrs.define
class SettingsNode:
    path: str  #: "" for the root, "router.retries" for a section, the key for a leaf
    name: str
    doc: str = ""
    children: list[SettingsNode] = attrs.Factory(list)
    setting: dict[str, Any] | None = None  #: a leaf: the API's SettingInfo

    @property
    def is_leaf(self) -> bool:
        return self.setting is not None

    def find(self, path: str) -> SettingsNode | None:
        if self.path == path:
            return self
        for child in self.children:
            if path == child.path or path.startswith(child.path + "."):
                return child.find(path)
        return None

    def leaves(self) -> int:
        return 1 if self.is_leaf else sum(c.leaves() for c in self.children)


def _section_doc(path: str) -> str:
    cls: Any = ServerConfig
    found = None
    for part in path.split("."):
        if not attrs.has(cls):
            return ""
        found = next((f for f in attrs.fields(cls) if yaml_key(f) == part), None)
        if found is None:
            return ""
        cls = found.type
    return doc_of(found) if found is not None else ""


def build_tree(settings: list[dict[str, Any]]) -> SettingsNode:
    """The menus for these settings, sections in the order their first key comes, keys sorted."""
    root = SettingsNode(path="", name="Settings")
    for info in sorted(settings, key=lambda s: s["key"]):
        parts = info["key"].split(".")
        node = root
        for depth, part in enumerate(parts[:-1]):
            path = ".".join(parts[: depth + 1])
            child = next((c for c in node.children if c.path == path), None)
            if child is None:
                child = SettingsNode(path=path, name=part, doc=_section_doc(path))
                node.children.append(child)
            node = child
        node.children.append(SettingsNode(path=info["key"], name=parts[-1], doc=info.get("doc", ""), setting=info))
    return root


def check_value(key: str, text: str, kind: str) -> Any:
    """The value typed for `key` as the API takes it; ValueError saying what is wrong, before anything is sent.

    Types and bounds are the registry's; a key this llmgw does not know is
    left for the server to judge.
    """
    from llmgw.admin.errors import ApiError
    from llmgw.admin.settings import REGISTRY

    text = text.strip()
    if kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError(f"{key}: expected true or false, got {text!r}")
        value: Any = text == "true"
    elif kind == "integer":
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{key}: expected a whole number, got {text!r}") from None
    else:
        value = text
        if not text:
            raise ValueError(f"{key}: give a value")
    spec = REGISTRY.get(key)
    if spec is not None and kind in ("integer", "duration"):
        try:
            spec.parse(value, ServerConfig())
        except ApiError as exc:
            raise ValueError(exc.message) from None
    return value
