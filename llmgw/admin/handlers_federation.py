"""Handler of the federation peers: each peer server.yaml names, whether it is up, why not, and its models.

Peers are declared in server.yaml's `federation.peers` (llmgw.router.federation
reads them); this shows what the gateway in this process made of them at its
last read of each peer. It never shows a peer's key.
"""

from __future__ import annotations

import socket

import attrs

from llmgw.admin.dispatch import Call
from llmgw.admin.fields import field

__all__ = ["FederationPeerInfo", "FederationPeerList", "list_federation_peers"]


@attrs.frozen(kw_only=True)
class FederationPeerInfo:
    """One peer cluster, as this cluster's gateway last read it."""

    name: str = field("The peer's name: its models are listed here as NAME/MODEL.")
    url: str = field("The peer gateway's OpenAI API base the models are read from and requests sent to.")
    up: bool = field("Whether the last read of the peer's /v1/models succeeded.")
    reason: str = field("Why the peer is down (or not read yet); empty while it is up.", "")
    models: list[str] = field("The models it served at the last good read, by their name at the peer.",
                              factory=list)


@attrs.frozen(kw_only=True)
class FederationPeerList:
    """The peers of server.yaml's federation.peers, and this cluster's own name in the hop header."""

    cluster_id: str = field("This cluster's name in the x-llmgw-hop header it sends its peers.")
    peers: list[FederationPeerInfo] = field("Each peer, in the order server.yaml names them.", factory=list)


async def list_federation_peers(call: Call) -> FederationPeerList:
    """The federation peers server.yaml names, each with whether it is up, why not, and the models it
    serves. Where no gateway runs in this server's process, none is read here: each is listed down, saying so."""
    gateway = getattr(call.admin.live, "gateway", None)
    federation = getattr(gateway, "federation", None)
    if federation is None:
        config = call.admin.config.federation
        return FederationPeerList(cluster_id=config.cluster_id or socket.gethostname(), peers=[
            FederationPeerInfo(name=p.name, url=p.url, up=False, models=[],
                               reason="no gateway runs in this process, so the peer is not read here; ask the "
                                      "control plane that serves the client API")
            for p in config.peers])
    return FederationPeerList(cluster_id=federation.cluster_id, peers=[
        FederationPeerInfo(name=p.name, url=p.base_url, up=p.up, reason=p.reason, models=list(p.models))
        for p in federation.peers.values()])
