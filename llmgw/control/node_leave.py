"""A node leaving the cluster: `llmgw wipe` on it tells the control plane, which forgets it and revokes its certificate.

`llmgw ctl node remove NAME` (the control plane's `remove_node`) revokes the
node's certificate the same way, into the same list.

`POST /agent/v1/leave` on the agent port, with the node's own client
certificate (the one `llmgw join` or `server init --node` made): the node
is named by that certificate and by nothing in the request, so a node can
take only itself out. The leading control plane then, in this order:

1. adds the certificate's serial to the revoked ones, kept in the store
   (`control.revoked_nodes`), so that certificate never registers again on
   any control plane of the cluster (the agent port refuses it in words);
2. closes the node's agent connection;
3. forgets the node's replicas (the reconciler places them again on the
   nodes left) and the node itself, so `ctl nodes` no longer lists it;
4. writes `nodes.leave` to the audit log, as `node:NAME`.

    -> 200 {"node": NAME, "replicas": [ID, ...], "serial": HEX}
    -> 403 {"error": ...}   no client certificate of this cluster
    -> 409 {"error": ...}   a standby: the leader is named, ask it

The same node joining again (a new code, `llmgw join`) gets a new
certificate with a new serial, and is welcome.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.pki.tls import RevocationList, common_name, peer_certificate

if TYPE_CHECKING:
    from llmgw.control.reconciler import Reconciler
    from llmgw.control.service import ControlPlane

__all__ = ["LEAVE_PATH", "REVOKED_SETTING", "NodeLeave", "forget_node"]

log = logging.getLogger("llmgw.control")

LEAVE_PATH = "/agent/v1/leave"
REVOKED_SETTING = "control.revoked_nodes"  #: {serial (hex): {"node": NAME, "at": ISO time, "why": ...}}


def forget_node(rec: Reconciler, node_id: str, why: str) -> list[str]:
    """Forget a node and what ran on it, as when it is lost, but said as `why`; the ids of its replicas.

    Replicas of other nodes whose other ranks ran there are stopped, and placed again whole."""
    gone: list[str] = []
    for r in [r for r in rec.records.values() if r.node == node_id]:
        gone.append(r.id)
        if getattr(r, "workers", ()):  # a replica over several nodes: its other ranks are stopped first
            if not r.retiring:
                rec._retire(r, why)
            if not r.head_gone:
                rec._head_gone(r, "stopped", why)
            continue
        rec._drop(r, why)
    for r in [r for r in rec.records.values() if any(w.node == node_id for w in getattr(r, "workers", ()))]:
        for worker in r.workers:
            if worker.node == node_id and worker.state != "gone":
                rec._rank_gone(r, worker, "stopped", why)
    rec.inventory.forget(node_id)
    rec.inventory.uncordon(node_id)
    rec.kick()
    return gone


class NodeLeave:
    """The leave route and the revoked certificates, for one control plane."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._last = RevocationList()  #: the last list read, used while the store cannot be read

    def routes(self) -> list[web.RouteDef]:
        return [web.post(LEAVE_PATH, self.handle)]

    async def revoked(self) -> dict[str, Any]:
        setting = await self.plane.store.get_setting(REVOKED_SETTING)
        value = setting.value if setting is not None else None
        return dict(value) if isinstance(value, dict) else {}

    async def revocations(self) -> RevocationList:
        """What the agent port refuses: every certificate of a node that left. While the store cannot be
        read, the last list read stands, so agents still register through a store outage."""
        try:
            self._last = RevocationList(serials=list((await self.revoked()).keys()))
        except Exception as exc:  # noqa: BLE001 - any store failure: keep admitting by the last list
            log.warning("revoked node certificates not read; using the last list read: %s", exc)
        return self._last

    async def revoke(self, serial: str, node: str, *, actor: str, why: str) -> None:
        """Add a node's certificate (its serial, hex) to the revoked ones in the store; the store's error, if any,
        goes to the caller, nothing changed."""
        revoked = await self.revoked()
        if serial not in revoked:
            revoked[serial] = {"node": node, "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               "why": why}
            await self.plane.store.set_setting(REVOKED_SETTING, revoked, actor=actor)
        self._last = RevocationList(serials=list(revoked))

    async def handle(self, request: web.Request) -> web.Response:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        cert = peer_certificate(ssl_object) if ssl_object is not None else None
        node = common_name(cert) if cert is not None else None
        if not node:
            return _error(403, "leaving needs the node's client certificate from this cluster's CA")
        plane = self.plane
        if not plane.leading or plane.reconciler is None:
            leader = plane.leadership.leader
            return _error(409, f"this control plane is a standby; the leader is {leader or 'not known yet'}")
        serial = f"{cert.serial_number:x}"
        actor = f"node:{node}"
        try:  # revoked first: nothing is forgotten unless the certificate stays out
            await self.revoke(serial, node, actor=actor, why="left the cluster (llmgw wipe)")
        except Exception as exc:  # noqa: BLE001 - a store that refuses: said, nothing changed
            return _error(503, f"the store cannot record the revocation now ({exc}); nothing was changed, try again")
        session = plane.endpoint.sessions.get(node)
        if session is not None:
            await session.close("the node left the cluster (llmgw wipe)")
        replicas = forget_node(plane.reconciler, node, f"its node {node} left the cluster")
        await plane.store.append_audit(actor, "nodes.leave", actor, {"serial": serial, "replicas": replicas,
                                                                    "peer": request.remote or ""})
        log.warning("node left the cluster; its certificate is revoked",
                    extra={"node_id": node, "serial": serial, "replicas": replicas})
        return web.json_response({"node": node, "replicas": replicas, "serial": serial})


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
