"""A node tells its control plane it is leaving: the first step of `llmgw wipe` on a node.

It dials each control plane agent.yaml names, with the node's own
certificate, and posts to `/agent/v1/leave` (llmgw/control/node_leave.py).
The leader revokes that certificate, forgets the node and places its
replicas elsewhere; a standby answers 409 and the next address is tried.
Whatever happens it returns one sentence: wipe goes on either way, and
when no control plane heard, the sentence says how to remove the node by
hand.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

import attrs

from llmgw.install.layout import Layout

__all__ = ["Leaving", "leaving", "tell_leaving"]

TIMEOUT = 10.0
LEAVE_PATH = "/agent/v1/leave"  # as llmgw.control.node_leave serves it


@attrs.frozen
class Leaving:
    """What a node's agent.yaml says it needs to leave: its name, its certificate and its control planes."""

    node: str
    cert: str
    key: str
    ca: str
    control_planes: tuple[str, ...]


def leaving(layout: Layout) -> Leaving | None:
    """The node this machine is, from agent.yaml; None when it is no node (or runs without TLS)."""
    if not layout.agent_yaml.exists():
        return None
    try:
        from llmgw.config import load_agent_config

        agent = load_agent_config(layout.agent_yaml)
    except Exception:  # noqa: BLE001 - an agent.yaml that no longer loads: there is no one to tell
        return None
    if agent.insecure or not agent.control_planes:
        return None
    return Leaving(node=agent.node_id, cert=agent.tls.cert, key=agent.tls.key, ca=agent.tls.ca,
                   control_planes=tuple(agent.control_planes))


def _url(address: str) -> str:
    parts = urllib.parse.urlsplit(address if "://" in address else f"https://{address}")
    return f"https://{parts.netloc}{LEAVE_PATH}"


def tell_leaving(who: Leaving) -> tuple[bool, str]:
    """(told, a sentence): the leader has forgotten the node and revoked its certificate, or why not."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=who.ca)
        ctx.load_cert_chain(who.cert, who.key)
    except (OSError, ssl.SSLError) as exc:
        return False, (f"the control plane was not told (the node's certificate cannot be used: {exc}); remove the "
                       f"node there with `llmgw ctl node remove {who.node}`")
    problems = []
    for address in who.control_planes:
        req = urllib.request.Request(_url(address), data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=TIMEOUT) as r:
                answer = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error") or exc.reason
            except ValueError:
                message = exc.reason
            problems.append(f"{address}: {message}")
            continue
        except (urllib.error.URLError, OSError, ssl.SSLError, ValueError) as exc:
            problems.append(f"{address}: {getattr(exc, 'reason', None) or exc}")
            continue
        moved = answer.get("replicas") or []
        return True, (f"control plane {address}: node {who.node} left the cluster, its certificate is revoked"
                      + (f"; its replicas ({', '.join(moved)}) are placed elsewhere" if moved else ""))
    return False, (f"no control plane heard that node {who.node} leaves ({'; '.join(problems)}); remove it there "
                   f"with `llmgw ctl node remove {who.node}`")
