"""Federation: other llmgw clusters as providers, their models served here as PEER/MODEL.

Each peer of server.yaml's `federation.peers` is read (`GET /v1/models` with
the key it issued to this cluster) when the gateway starts and every
`federation.sync_interval`; each model it serves itself becomes a replica of
`PEER/MODEL` here, an OpenAI-shaped upstream at the peer's gateway carrying
that key, so the ordinary serving path forwards to it (streamed or whole,
retried, a fallback or with fallbacks of its own). A model the peer stops
listing is withdrawn here at the next read; a read that fails marks the peer
down: its models stay listed, not ready, and answer 503 with the reason (or
move to their fallbacks) until a read succeeds again.

Every request forwarded carries `x-llmgw-hop: <cluster id>`. A request that
arrives with that header came from a peer: it is served only by this
cluster's own models (federation is not transitive), and one naming this
very cluster is a loop and is refused. The peer's models list, read with the
header, leaves out what the peer itself federates.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.config.server import FederationConfig, FederationPeer, ServerConfig
from llmgw.obs import logs
from llmgw.router.errors import GatewayError
from llmgw.router.replicas import Replica, ReplicaSet

log = logs.get("llmgw.router.federation")

HOP_HEADER = "x-llmgw-hop"
#: The source of a peer's replicas in the replica set (residency counts it as outside the cluster).
SOURCE = "federation"
#: What a peer's own models list says of a model it forwards to another peer (left out by whoever syncs).
OWNER_PREFIX = "federation:"
_PEER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: An ejection that lasts until the next good read of the peer.
_DOWN_FOR = 10 ** 9


class Peer:
    """One peer cluster: where it is, its key, the models it last listed and whether it is up."""

    def __init__(self, config: FederationPeer) -> None:
        self.name = config.name
        self.api_key = config.api_key
        url = config.url.rstrip("/")
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.models: list[str] = []
        self.up = False
        self.reason = "not read yet"
        self.synced_at = 0.0

    def replica_id(self, model: str) -> str:
        return f"{SOURCE}:{self.name}/{model}"


class Federation:
    """The peers, kept in step with what each one lists; reached through `gw.federation`."""

    def __init__(self, config: FederationConfig, replicas: ReplicaSet) -> None:
        self.cluster_id = config.cluster_id or socket.gethostname()
        self.interval = max(0.05, config.sync_interval.total_seconds())
        self.replicas = replicas
        self.peers = {p.name: Peer(p) for p in config.peers}
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self, session: aiohttp.ClientSession) -> None:
        if self.peers:
            self._session = session
            self._task = asyncio.create_task(self._run(), name="federation sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.gather(*(self.sync(peer) for peer in self.peers.values()))
            await asyncio.sleep(self.interval)

    # -- reading a peer -------------------------------------------------------

    async def sync(self, peer: Peer) -> None:
        """Read the peer's models once: add the new, withdraw the gone, or mark the peer down."""
        assert self._session is not None
        try:
            names = await self._read_models(peer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to read it: the peer is down until a read succeeds
            self._down(peer, _why(exc))
            return
        was_up = peer.up
        peer.up, peer.reason, peer.synced_at = True, "", time.monotonic()
        for gone in set(peer.models) - set(names):
            self.replicas.remove(peer.replica_id(gone))
        for name in names:
            replica = self.replicas.get(peer.replica_id(name))
            if replica is None:
                self.replicas.add(Replica(
                    id=peer.replica_id(name), model=f"{peer.name}/{name}", base_url=peer.base_url,
                    engine_model=name, api_key=peer.api_key, source=SOURCE,
                    extra_headers={HOP_HEADER: self.cluster_id}))
            elif replica.health.ejected_until >= _DOWN_FOR:  # the peer is back: its models are served again
                replica.health.ejected_until, replica.health.last_error = 0.0, ""
        if not was_up or set(names) != set(peer.models):
            logs.event(log, "federation peer read", peer=peer.name, models=len(names))
        peer.models = names

    async def _read_models(self, peer: Peer) -> list[str]:
        # a connection of its own each time: the read says whether the peer answers now, not a kept socket
        headers = {"Authorization": "Bearer " + peer.api_key.reveal(), HOP_HEADER: self.cluster_id,
                   "Connection": "close"}
        async with self._session.get(peer.base_url + "/models", headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=min(10.0, self.interval * 2 + 1))) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                raise PeerError(f"/v1/models answered {resp.status}: {text}")
            body = await resp.json(content_type=None)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise PeerError("/v1/models did not answer a list of models (is the URL an llmgw gateway?)")
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)
                and not str(m.get("owned_by", "")).startswith(OWNER_PREFIX)]

    def _down(self, peer: Peer, reason: str) -> None:
        if peer.up or peer.reason != reason:
            logs.event(log, "federation peer down", logging.WARNING, peer=peer.name, reason=reason)
        peer.up, peer.reason = False, reason
        for name in peer.models:
            replica = self.replicas.get(peer.replica_id(name))
            if replica is not None:
                replica.health.ejected_until = float(_DOWN_FOR)
                replica.health.last_error = "peer_down"

    # -- serving --------------------------------------------------------------

    def peer_of(self, model: str) -> Peer | None:
        """The peer serving `model` (a PEER/MODEL name this cluster lists), or None."""
        for replica in self.replicas.replicas_for(model):
            if replica.source == SOURCE:
                return self.peers.get(replica.id[len(SOURCE) + 1:].split("/", 1)[0])
        return None

    def check(self, request: web.Request, model: str, fallbacks: tuple[str, ...]) -> None:
        """Refuse a loop, a request a peer passes on to another peer, or a model of a peer that is down."""
        hops = [h.strip() for h in request.headers.get(HOP_HEADER, "").split(",") if h.strip()]
        if self.cluster_id in hops:
            raise GatewayError(508, "federation_loop",
                               f"this request has already passed through cluster {self.cluster_id!r} "
                               f"({HOP_HEADER}: {', '.join(hops)}): federation peers forward to each other in a "
                               "loop; remove one of them from the other's federation.peers", type="server_error")
        peer = self.peer_of(model)
        if peer is None:
            return
        if hops:
            raise GatewayError(403, "federation_not_transitive",
                               f"model {model!r} is served by federation peer {peer.name!r}, and this request came "
                               f"from another cluster ({HOP_HEADER}: {', '.join(hops)}); a cluster serves its "
                               "peers only its own models: ask that peer directly", param="model")
        if not peer.up and not fallbacks:
            raise GatewayError(503, "peer_unavailable",
                               f"model {model!r} is served by federation peer {peer.name!r}, which is down: "
                               f"{peer.reason}; it is read again every {self.interval:g}s",
                               retry_after=self.interval)

    def owner(self, model: str) -> str:
        """`owned_by` of a model in /v1/models: the peer's for a federated one, so peers leave it out."""
        peer = self.peer_of(model)
        return OWNER_PREFIX + peer.name if peer is not None else "llmgw"


class PeerError(Exception):
    pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, PeerError):
        return str(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "/v1/models did not answer in time"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port}"
    return f"/v1/models failed: {type(exc).__name__}"


def problems(config: ServerConfig) -> list[tuple[tuple, str]]:
    """What is wrong with `federation:` (config check and start-up), as (where, what) pairs."""
    out: list[tuple[tuple, str]] = []
    seen: set[str] = set()
    local = {m.name for m in config.models}
    for i, peer in enumerate(config.federation.peers):
        where = ("federation", "peers", i)
        if not _PEER_NAME.fullmatch(peer.name):
            out.append(((*where, "name"), f"{peer.name!r} is not a peer name: letters, digits, . _ - and no "
                        "slash (it becomes the PEER of PEER/MODEL)"))
        elif peer.name in seen:
            out.append(((*where, "name"), f"peer {peer.name!r} is named twice; give each peer its own name"))
        seen.add(peer.name)
        if not re.match(r"https?://[^/\s]+", peer.url):
            out.append(((*where, "url"), f"{peer.url!r} is not an http:// or https:// address of the peer's gateway"))
        clash = sorted(m for m in local if m.startswith(peer.name + "/"))
        if clash:
            out.append(((*where, "name"), f"models {', '.join(clash)} start with {peer.name}/, as this peer's "
                        "models will; rename the peer or the models"))
    return out


def describe(federation: Any) -> list[dict]:
    """The peers as the log and the admin views show them; never the key."""
    return [{"name": p.name, "url": p.base_url, "up": p.up, "reason": p.reason, "models": list(p.models)}
            for p in federation.peers.values()]
