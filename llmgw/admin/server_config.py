"""This control plane's server.yaml through the admin API: every key read, changes saved keeping comments.

`GET /server-config` walks the configuration classes (as the reference
does) and answers, for each key, what the file sets, what this server runs
with, whether it is a cluster setting (kept in the store, changed through
/settings) and whether a change is taken up at once or at the next restart.
`PUT /server-config` edits the file in round-trip mode (llmgw.config.edit),
checks the whole result with the loader before anything is written, writes
it atomically, and hands the keys a running server can take up to its live
applier (llmgw.server.live); the answer says key by key which wait for a
restart. Secrets are never answered: *** and where they are read from.

When the server runs with a live applier, a change made to the file by hand
is noticed too (`watch_file`): it is checked, the live keys are taken up,
and the log says which keys wait for a restart; a file that does not load is
left alone and the log says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from llmgw.admin.audit import REMOVED
from llmgw.admin.convert import structure
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.in_force import differing
from llmgw.admin.server_config_types import (
    ChangedKey,
    ConfigKeyInfo,
    ServerConfigEdit,
    ServerConfigInfo,
    ServerConfigSaved,
)
from llmgw.admin.settings import REGISTRY
from llmgw.admin.state import ADMIN, Admin
from llmgw.config.edit import check_text, edit_text, secret_paths, write_atomically
from llmgw.config.errors import ConfigError
from llmgw.config.load import make_converter
from llmgw.config.schema import (
    HIDDEN,
    MISSING,
    KeySpec,
    PathError,
    hide_secrets,
    keys_of,
    parse_path,
    plain_at,
    template_of,
    type_at,
    value_at,
)
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig

log = logging.getLogger("llmgw.admin")

__all__ = ["WATCH_S", "get_server_config", "put_server_config", "watch_file"]

#: Seconds between two looks at server.yaml for a change made by hand.
WATCH_S = 5.0
#: The most keys one change may name.
MAX_KEYS = 200
#: When a change to the file of a cluster setting the store sets takes effect.
STORE_WINS = "when unset in the store"

NOT_FROM_A_FILE = ("this server was not started from a server.yaml (llmgw server --config PATH), so there is no "
                   "file to change here")


# ---------------------------------------------------------------- reading


def _plain(node: Any) -> Any:
    """Round-trip YAML as plain JSON values."""
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    for kind in (bool, int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node if node is None else str(node)


def _read(path: str) -> tuple[str, Any, ServerConfig | None, list[str]]:
    """(text, the file as plain data, the configuration it makes or None, its problems). Runs in a thread."""
    from llmgw.config.load import parse_yaml_text

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return "", None, None, [f"{path} cannot be read: {exc.strerror or exc}"]
    try:
        document = parse_yaml_text(text, path)
        config = check_text(text, path)
    except ConfigError as exc:
        plain = None
        try:
            plain = _plain(parse_yaml_text(text, path))
        except ConfigError:
            pass
        return text, plain, None, [p.located(path) for p in exc.details]
    return text, _plain(document), config, []


_CONVERTER = make_converter()


def _json(value: Any, spec_path: tuple) -> Any:
    if value is MISSING:
        return None
    if isinstance(value, Secret):
        return HIDDEN
    return hide_secrets(_CONVERTER.unstructure(value), type_at(ServerConfig, spec_path))


def _secret_from(written: Any) -> str | None:
    if written is None or written is MISSING:
        return None
    text = str(written).strip()
    return text if _reference(text) else "server.yaml itself"


def _live_keys(admin: Admin) -> frozenset[str]:
    return frozenset(admin.live.keys) if admin.live is not None else frozenset()


def _applies(spec: KeySpec, live: frozenset[str]) -> str:
    if spec.template:
        return "restart"
    if spec.kind == "section":
        inner = [s.path for s in keys_of(ServerConfig)
                 if s.path.startswith(spec.path + ".") and not s.template and s.kind != "section"]
        return "live" if inner and all(k in live for k in inner) else "restart"
    return "live" if spec.path in live else "restart"


def _pending(admin: Admin, file_config: ServerConfig | None) -> list[str]:
    """The keys whose value in the file (or, for a cluster setting, in the store) waits for a restart."""
    if file_config is None:
        return []
    live = _live_keys(admin)
    return [k for k in differing(admin.config, admin.in_force.wanted(file_config)) if k not in live]


async def get_server_config(call: Call) -> ServerConfigInfo:
    """Every key of this control plane's server.yaml, in the configuration reference's order: its type, doc
    and default, what the file sets, what runs, whether it is a cluster setting, and whether a change is taken
    up at once or at the next restart. Secrets are never shown: *** and where they are read from."""
    admin = call.admin
    path = admin.config_path
    plain, file_config, problems = None, None, []
    if path is not None:
        _, plain, file_config, problems = await asyncio.to_thread(_read, path)
    kept = await admin.in_force.refresh(call.store)
    live = _live_keys(admin)
    pending = set(_pending(admin, file_config))
    keys = []
    for spec in keys_of(ServerConfig):
        parts = parse_path(spec.path.replace("[]", "[0]"))
        info: dict[str, Any] = {}
        if not spec.template and spec.kind != "section":
            written = plain_at(plain, parts) if plain is not None else MISSING
            info = {
                "in_file": written is not MISSING,
                "file_value": None if written is MISSING else hide_secrets(written, type_at(ServerConfig, parts)),
                "value": _json(value_at(admin.config, parts), parts),
                "secret_from": _secret_from(written) if spec.secret else None,
                "restart_pending": spec.path in pending,
            }
            setting = kept.get(spec.path) if spec.path in REGISTRY else None
            if setting is not None:
                info.update(store_value=setting.value, store_actor=setting.actor, store_updated_at=setting.updated_at)
        elif plain is not None and not spec.template:
            info["in_file"] = plain_at(plain, parts) is not MISSING
        keys.append(ConfigKeyInfo(
            key=spec.path, kind=spec.kind, type=spec.type_name, doc=spec.doc, default=spec.default,
            required=spec.required, nullable=spec.nullable, choices=list(spec.choices), item_kind=spec.item_kind,
            cluster=spec.path in REGISTRY, applies=_applies(spec, live), **info))
    return ServerConfigInfo(path=path, editable=path is not None and plain is not None,
                            reason=_not_editable(path, plain, problems), file_problems=problems,
                            restart_pending=sorted(pending, key=_order), keys=keys)


def _not_editable(path: str | None, plain: Any, problems: list[str]) -> str | None:
    if path is None:
        return NOT_FROM_A_FILE
    if plain is None:
        return "; ".join(problems) or f"{path} cannot be read"
    return None


@functools.cache
def _orders() -> dict[str, int]:
    return {s.path: i for i, s in enumerate(keys_of(ServerConfig))}


def _order(key: str) -> int:
    return _orders().get(key, len(_orders()))


# ---------------------------------------------------------------- changing


def _audit_fields(call: Call, raw: Any) -> None:
    """The fields the audit log keeps: a secret's value never, even one a key's name does not give away."""
    if not isinstance(raw, dict):
        return
    given = raw.get("set")
    if isinstance(given, dict):
        hidden = secret_paths(given)
        call.fields["set"] = {k: (REMOVED if k in hidden and not _reference(v) else v) for k, v in given.items()}


def _reference(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith(("env:", "file:")))


def _edit(path: str, edit: ServerConfigEdit) -> tuple[Any, Any, ServerConfig]:
    """Change the file, or refuse and leave it as it was: (plain before, plain after, the new configuration).

    Runs in a thread: it reads and writes the file, and a secret's file.
    """
    from llmgw.config.load import parse_yaml_text

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ApiError(409, f"{path} cannot be read: {exc.strerror or exc}; nothing was changed") from None
    try:
        before = _plain(parse_yaml_text(text, path))
        new_text = edit_text(text, edit.set_, edit.unset)
    except PathError as exc:
        raise ApiError(400, f"{exc}; {path} was not changed") from None
    except ConfigError as exc:
        raise ApiError(409, f"{path} cannot be changed here as it is: {exc}; fix it by hand first",
                       [p.located(path) for p in exc.details]) from None
    try:
        config = check_text(new_text, path)
    except ConfigError as exc:
        problems = [str(p) for p in exc.details]
        raise ApiError(400, f"{'; '.join(problems)}. {path} was not changed; correct the value and send it again",
                       problems) from None
    if new_text != text:
        try:
            write_atomically(path, new_text)
        except OSError as exc:
            where = Path(os.path.realpath(path)).parent
            raise ApiError(500, f"{path} cannot be written ({exc.strerror or exc}): the server writes a new file "
                           f"beside it in {where} and renames it over the old one, so it needs to write in "
                           "that folder; nothing was changed") from None
    return before, _plain(parse_yaml_text(new_text, path)), config


def _effect(key: str, applied: list[str], restart: list[str]) -> str:
    """When a change to `key` takes effect: now, at restart, or in force (what runs already)."""
    try:
        parts = parse_path(key)
    except PathError:
        return "at restart"
    inside = template_of(parts)
    touched = [k for k in (*applied, *restart)
               if k == inside or k.startswith(inside + ".") or inside.startswith((k + ".", k + "["))]
    if any(k in restart for k in touched):
        return "at restart"
    if any(k in applied for k in touched):
        return "now"
    return "in force"


def _message(path: str, applied: list[str], restart: list[str], changed: bool) -> str:
    if not changed:
        return f"{path} already said that; nothing was written."
    said = [f"saved {path}, its comments kept"]
    if applied:
        said.append(f"in force now: {', '.join(applied)}")
    if restart:
        said.append(f"taking effect when llmgw server restarts: {', '.join(restart)}")
    return "; ".join(said) + "."


async def put_server_config(call: Call) -> ServerConfigSaved:
    """Change keys of this control plane's server.yaml: sets (in the order given), then unsets. The file is
    edited in place, keeping its comments and the order of its keys; the whole result is checked as the
    server checks it at start before anything is written (a refusal names the key and leaves the file as it
    was), then written at once. Keys the running server can take up are in force at once; the answer says
    which take effect only at the next restart."""
    raw = call.body
    _audit_fields(call, raw)
    admin = call.admin
    path = admin.config_path
    call.target = f"file:{path}" if path else call.target
    edit = structure(raw, ServerConfigEdit)
    if path is None:
        raise ApiError(409, NOT_FROM_A_FILE)
    names = [*edit.set_, *edit.unset]
    if not names:
        raise ApiError(400, "nothing to change: give set {key: value} or unset [key]")
    if len(names) > MAX_KEYS:
        raise ApiError(400, f"{len(names)} keys in one change; at most {MAX_KEYS}")
    async with admin.config_lock:
        before, after, new_config = await asyncio.to_thread(_edit, path, edit)
        applied, restart = admin.in_force.take_up(file=new_config)
        with contextlib.suppress(OSError):
            admin.config_seen = _signature(path)
    changed = []
    for key in names:
        parts = parse_path(key)
        t = type_at(ServerConfig, parts)
        # Indexes name entries as the file had them, so "after" is what was sent (an unset: nothing).
        was = plain_at(before, parts)
        now = hide_secrets(edit.set_[key], t) if key in edit.set_ else None
        overridden = template_of(parts) in admin.in_force.settings and template_of(parts) not in admin.in_force.problems
        changed.append(ChangedKey(key=key, before=None if was is MISSING else hide_secrets(was, t), after=now,
                                  takes_effect=STORE_WINS if overridden else _effect(key, applied, restart),
                                  cluster=template_of(parts) in REGISTRY))
    if applied or restart:
        log.info("server.yaml changed through the admin API", extra={"fields": {
            "path": path, "applied": applied, "restart_needed": restart}})
    return ServerConfigSaved(path=path, changed=changed, applied=applied, restart_needed=restart,
                             message=_message(path, applied, restart, before != after))


# ---------------------------------------------------------------- a change made by hand


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino


async def take_up(admin: Admin) -> None:
    """Read server.yaml again and take up its live keys; the log says what waits for a restart or is wrong."""
    from llmgw.config.load import load_server_config

    path = admin.config_path
    assert path is not None and admin.live is not None
    async with admin.config_lock:
        try:
            seen = _signature(path)
        except OSError:
            return
        if seen == admin.config_seen:
            return
        admin.config_seen = seen
        try:
            new = await asyncio.to_thread(load_server_config, path)
        except ConfigError as exc:
            log.warning("server.yaml was changed but cannot be used; what runs is unchanged",
                        extra={"fields": {"path": path, "problems": [p.located(path) for p in exc.details]}})
            return
        applied, restart = admin.in_force.take_up(file=new)
    if applied or restart:
        log.info("server.yaml was changed", extra={"fields": {
            "path": path, "applied": applied, "restart_needed": restart}})


async def watch_file(app: web.Application) -> AsyncIterator[None]:
    """A cleanup context: look at server.yaml every WATCH_S seconds while the admin API runs."""
    admin = app[ADMIN]
    if admin.config_path is None or admin.live is None:
        yield
        return
    with contextlib.suppress(OSError):
        admin.config_seen = _signature(admin.config_path)

    async def loop() -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                await take_up(admin)
            except Exception:  # the next look tries again; the server serves on
                log.exception("server.yaml could not be read again")

    task = asyncio.get_running_loop().create_task(loop(), name="llmgw-server-yaml-watch")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
