"""The changes an operator makes from the console, each one call of the admin API.

Each returns the API's answer and has the resources it changed read again,
so the screen shows the result within a moment. Refusals come up as
`AdminError` with the server's words; the views show them as they are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmgw.cli.ctl_client import quote
from llmgw.console.model.api import AdminApi, AdminError
from llmgw.console.model.watched import LOG_LINES, ConsoleModel

__all__ = ["Actions", "read_model_definition"]

#: Seconds Back up now waits for the archive (the store is copied and compressed meanwhile).
BACKUP_TIMEOUT = 1800.0
#: Lines of a replica's engine log shown at once: as many as the Logs view reads of an agent's.
ENGINE_LOG_LINES = LOG_LINES


class Actions:
    def __init__(self, api: AdminApi, model: ConsoleModel) -> None:
        self.api = api
        self.model = model

    def _changed(self, names: Iterable[str]) -> None:
        self.model.refresh([*names, "summary", "audit"])

    async def _call(self, names: Iterable[str], method: str, endpoint: str, body: Any = None, /,
                    **query: Any) -> Any:
        try:
            return await self.api.request(method, endpoint, body=body, query=query)
        finally:
            # A refusal is recorded in the audit log too, so read again either way.
            self._changed(names)

    # ---- nodes

    async def node_state(self, node: str, verb: str, reason: str = "") -> dict[str, Any]:
        """cordon, uncordon or drain."""
        body = None if verb == "uncordon" else {"reason": reason}
        return await self._call(("nodes",), "POST", f"/nodes/{quote(node)}/{verb}", body)

    async def remove_node(self, node: str) -> dict[str, Any]:
        return await self._call(("nodes", "replicas"), "DELETE", f"/nodes/{quote(node)}")

    async def node(self, node: str) -> dict[str, Any]:
        return await self.api.get(f"/nodes/{quote(node)}")

    async def join_code(self, ttl: str, name: str = "") -> dict[str, Any]:
        """A fresh single-use join code; the answer holds the `llmgw join ...` line, shown once."""
        body: dict[str, Any] = {"ttl": ttl}
        if name:
            body["name"] = name
        return await self._call(("nodes",), "POST", "/nodes/join-codes", body)

    async def add_node_over_ssh(self, target: str, *, port: int = 22, identity: str = "", name: str = "",
                                ssh_options: list[str] | None = None, root: str = "/",
                                say: Callable[[str], None]) -> dict[str, Any]:
        """`llmgw node add` itself, run from the console: `say` is told each step as it happens (in a
        thread; ssh runs meanwhile). A failure is an AdminError in node add's own words."""
        from llmgw.nodes.ssh_add import AddError, add_node

        loop = asyncio.get_running_loop()

        def call(method: str, path: str, body: Any = None) -> Any:
            return asyncio.run_coroutine_threadsafe(self.api.request(method, path, body=body), loop).result(60)

        def get_node(node: str) -> dict[str, Any] | None:
            try:
                return call("GET", f"/nodes/{quote(node)}")
            except AdminError:  # not registered yet
                return None

        try:
            return await asyncio.to_thread(
                add_node, target, port=port, identity=identity or None, ssh_options=ssh_options or (), name=name,
                root=root, say=say,
                make_code=lambda node: call("POST", "/nodes/join-codes", {"ttl": "15m", "name": node}),
                get_node=get_node)
        except AddError as exc:
            raise AdminError(str(exc)) from None
        finally:
            self._changed(("nodes",))

    # ---- jobs

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.api.get(f"/jobs/{quote(job_id)}")

    # ---- upgrades

    async def upgrade(self, body: dict[str, Any]) -> dict[str, Any]:
        """Start the cluster's upgrade (or its way back) on the leader: the job, at once."""
        return await self._call(("jobs", "nodes"), "POST", "/upgrade", body)

    # ---- models

    async def model_detail(self, name: str) -> dict[str, Any]:
        return await self.api.get(f"/models/{quote(name)}")

    async def explain(self, name: str) -> dict[str, Any]:
        return await self.api.get(f"/models/{quote(name)}/placement")

    async def scale(self, name: str, change: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("models", "replicas", "nodes"), "POST", f"/models/{quote(name)}/scale", change)

    async def restart(self, name: str, in_place: bool) -> dict[str, Any]:
        return await self._call(("replicas",), "POST", f"/models/{quote(name)}/restart", {"in_place": in_place})

    async def restart_replica(self, replica: str, in_place: bool) -> dict[str, Any]:
        return await self._call(("replicas", "jobs"), "POST", f"/replicas/{quote(replica)}/restart",
                                {"in_place": in_place})

    async def remove_model(self, name: str) -> dict[str, Any]:
        return await self._call(("models", "replicas", "nodes"), "DELETE", f"/models/{quote(name)}")

    async def add_model(self, spec: dict[str, Any], replace: bool) -> dict[str, Any]:
        return await self._call(("models", "replicas", "nodes"), "POST", "/models", spec,
                                replace=True if replace else None)

    async def change_model(self, name: str, change: dict[str, Any]) -> dict[str, Any]:
        """Set some of a run-time model's fields: its definition as the control plane has it, changed, sent back."""
        detail = await self.model_detail(name)
        spec = {**detail["spec"], **change}
        return await self._call(("models", "replicas", "nodes"), "POST", "/models", spec, replace=True)

    async def restart_all(self, models: list[str]) -> list[str]:
        """Restart every model's replicas, one model after another; a line per model, refusals included."""
        lines = []
        for name in models:
            try:
                answer = await self.api.post(f"/models/{quote(name)}/restart", {"in_place": False})
            except AdminError as exc:
                lines.append(f"{name}: {exc.message}")
                continue
            lines.append(f"{name}: restarting {', '.join(answer['replicas']) or 'nothing (no replica runs)'}")
        self._changed(("replicas",))
        return lines

    # ---- backups

    async def back_up(self) -> dict[str, Any]:
        """Make a backup archive on the control plane now; a large store takes a while, so the wait is long."""
        try:
            return await self.api.request("POST", "/backups", timeout=BACKUP_TIMEOUT)
        finally:
            self._changed(("backups",))

    # ---- usage and quotas

    async def export_usage(self, path: str, query: dict[str, Any]) -> int:
        """Write the CSV export to `path`; the number of rows written (the header not counted)."""
        text = await self.api.get("/usage/export", **query)
        await asyncio.to_thread(_write_text, path, text)
        return max(0, len(text.splitlines()) - 1)

    async def set_quota(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("quotas",), "PUT", "/quotas", body)

    async def remove_quota(self, scope: str) -> dict[str, Any]:
        return await self._call(("quotas",), "DELETE", "/quotas", scope=scope)

    # ---- people

    async def create_user(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("users",), "POST", "/users", body)

    async def user(self, user: str) -> dict[str, Any]:
        return await self.api.get(f"/users/{quote(user)}")

    async def user_state(self, user: str, state: str) -> dict[str, Any]:
        return await self._call(("users",), "POST", f"/users/{quote(user)}/state", {"state": state})

    async def user_role(self, user: str, role: str) -> dict[str, Any]:
        return await self._call(("users",), "POST", f"/users/{quote(user)}/role", {"role": role})

    async def add_member(self, user: str, path: str, role: str) -> dict[str, Any]:
        return await self._call(("users",), "POST", f"/users/{quote(user)}/memberships", {"path": path, "role": role})

    async def remove_member(self, user: str, path: str) -> dict[str, Any]:
        return await self._call(("users",), "DELETE", f"/users/{quote(user)}/memberships", path=path)

    async def issue_key(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer holds the secret; the caller shows it once and keeps it nowhere."""
        return await self._call(("keys",), "POST", "/keys", body)

    async def rotate_key(self, key: str, overlap: str) -> dict[str, Any]:
        return await self._call(("keys",), "POST", f"/keys/{quote(key)}/rotate", {"overlap": overlap})

    async def revoke_key(self, key: str) -> dict[str, Any]:
        return await self._call(("keys",), "POST", f"/keys/{quote(key)}/revoke")

    async def create_org(self, path: str, project: bool) -> dict[str, Any]:
        return await self._call(("orgs",), "POST", "/orgs", {"path": path, "project": project})

    async def remove_org(self, path: str, kind: str) -> dict[str, Any]:
        return await self._call(("orgs",), "DELETE", "/orgs", path=path, kind=kind if kind != "org" else None)

    async def limits(self, scope: str) -> dict[str, Any]:
        return await self.api.get("/limits", scope=scope)

    async def set_limits(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("orgs", "keys"), "PUT", "/limits", body)

    async def clear_limits(self, scope: str) -> dict[str, Any]:
        return await self._call(("orgs", "keys"), "DELETE", "/limits", scope=scope)

    # ---- settings

    async def set_setting(self, key: str, value: Any) -> dict[str, Any]:
        return await self._call(("settings", "server-config"), "PUT", f"/settings/{quote(key)}", {"value": value})

    async def unset_setting(self, key: str) -> dict[str, Any]:
        return await self._call(("settings", "server-config"), "DELETE", f"/settings/{quote(key)}")

    async def engine_log(self, node: str, replica: str) -> dict[str, Any]:
        """The last lines of one replica's engine log, read by the leader from the node's agent."""
        return await self.api.get(f"/nodes/{quote(node)}/logs", replica=replica, lines=ENGINE_LOG_LINES)

    async def notify_test(self) -> dict[str, Any]:
        """A test event to every sink of server.yaml's notify section; how each answered."""
        return await self._call(("audit",), "POST", "/notify/test", {})

    async def save_server_config(self, body: dict[str, Any]) -> dict[str, Any]:
        """This machine's server.yaml changed: {"set": {key: value}, "unset": [key]}, all or nothing."""
        return await self._call(("server-config", "settings"), "PUT", "/server-config", body)


def _write_text(path: str, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


def read_model_definition(path: str) -> dict[str, Any]:
    """One model from a YAML file written as in server.yaml's `models:`; ValueError says what is wrong."""
    from llmgw.cli.ctl_client import load_yaml

    path = os.path.expanduser(path.strip())
    if not path:
        raise ValueError("give the path of a YAML file holding one model")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        spec = load_yaml(text, path)
    except Exception as exc:  # noqa: BLE001 - CtlError from ctl's reader, said in the form
        raise ValueError(getattr(exc, "message", str(exc))) from None
    if isinstance(spec, dict) and list(spec) == ["models"]:
        spec = spec["models"]
    if isinstance(spec, list) and len(spec) == 1:
        spec = spec[0]
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: expected one model, written as in server.yaml's models: list")
    return spec
