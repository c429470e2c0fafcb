"""What GET and PUT /server-config read and answer: this control plane's server.yaml, key by key."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from llmgw.admin.fields import field

__all__ = ["ChangedKey", "ConfigKeyInfo", "ServerConfigEdit", "ServerConfigInfo", "ServerConfigSaved"]


@attrs.frozen(kw_only=True)
class ConfigKeyInfo:
    """One key of server.yaml: what it is for, what the file sets and what this server runs with."""

    key: str = field("The key's path as the configuration reference writes it: router.retries.attempts; "
                     "models[].name is the name of every entry of models.")
    kind: str = field("How its value is written: boolean, integer, number, duration, size, secret, text, choice, "
                      "list, map or any; section, blocks (a list of sections) or block-map (named blocks) for a "
                      "key that holds others.")
    type: str = field("Its type as the configuration reference names it.")
    doc: str = field("What it is for.")
    default: Any = field("Its default as JSON; null for a section, a required key, or one whose default is none.",
                         None)
    required: bool = field("Every entry of its list must set it.", False)
    nullable: bool = field("It may be empty (null), meaning none.", False)
    choices: list[str] = field("The values allowed, for a choice.", factory=list)
    item_kind: str | None = field("The kind of each item, for a list or a map.", None)
    in_file: bool = field("server.yaml sets it.", False)
    file_value: Any = field("What server.yaml sets, as JSON (null when it does not); a secret is shown as ***.",
                            None)
    value: Any = field("What this server runs with, as JSON; a secret is shown as *** (null when none is set).",
                       None)
    secret_from: str | None = field("For a secret server.yaml sets: where it is read from (the file itself, "
                                    "env:NAME or file:/path), never the secret.", None)
    cluster: bool = field("A cluster setting: changed for every control plane through PUT /settings/{key}, kept "
                          "in the store.", False)
    store_value: Any = field("The cluster setting's value in the store; null when none is set there.", None)
    store_actor: str | None = field("Who set the cluster setting in the store.", None)
    store_updated_at: dt.datetime | None = field("When the cluster setting was set in the store.", None)
    applies: str = field("live: a change saved to server.yaml (or, for a cluster setting, to the store) is taken "
                         "up at once; restart: it takes effect when llmgw server next starts.", "restart")
    restart_pending: bool = field("server.yaml (or, for a cluster setting set there, the store) says otherwise than "
                                  "what runs, and only a restart takes it up.", False)


@attrs.frozen(kw_only=True)
class ServerConfigInfo:
    """This control plane's server.yaml: every key of the configuration reference, in its order."""

    path: str | None = field("The file this server was started from; null when it was not started from one.")
    editable: bool = field("PUT /server-config can change the file.")
    reason: str | None = field("Why the file cannot be changed here, when it cannot.", None)
    file_problems: list[str] = field("What is wrong with the file as it is now (a change made by hand since the "
                                     "server started); empty when it loads.", factory=list)
    restart_pending: list[str] = field("Keys whose value in the file takes effect only at the next restart.",
                                       factory=list)
    keys: list[ConfigKeyInfo] = field("Every key, sections before their keys.")


@attrs.frozen(kw_only=True)
class ServerConfigEdit:
    """Changes to server.yaml, made together or not at all."""

    set_: dict[str, Any] = field(
        "Keys to set, {path: value} with values as JSON: 3, true, \"30s\", a whole list of models; a list's entry "
        "by its index (models[1].scaling.min), a new entry at the end (models[2]); *** for a secret keeps the "
        "file's. Made in the order given.", factory=dict, key="set")
    unset: list[str] = field("Keys to take out of the file, so their defaults apply; a list's entry by its index "
                             "as the file has it (models[2]). Made after the sets.", factory=list)


@attrs.frozen(kw_only=True)
class ChangedKey:
    """One key the change named."""

    key: str = field("The key, as given.")
    before: Any = field("What the file set before (null: nothing); a secret is ***.")
    after: Any = field("What the file sets now (null: nothing, its default applies); a secret is ***.")
    takes_effect: str = field("now (taken up by the running server), at restart (when llmgw server next starts), "
                              "in force (what runs already), or when unset in the store (a cluster setting the "
                              "store sets, which wins over the file).")
    cluster: bool = field("A cluster setting, which PUT /settings/{key} changes for every control plane.", False)


@attrs.frozen(kw_only=True)
class ServerConfigSaved:
    """What a change to server.yaml did."""

    path: str = field("The file written.")
    changed: list[ChangedKey] = field("Each key the change named, before and after.")
    applied: list[str] = field("Keys the running server took up at once.", factory=list)
    restart_needed: list[str] = field("Keys whose value in the file takes effect only when llmgw server next "
                                      "starts (this change's and any made before).", factory=list)
    message: str = field("What happened, in a sentence or two.")
