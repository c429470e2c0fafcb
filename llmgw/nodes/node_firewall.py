"""A node's firewall table, as `llmgw join` writes and applies it: the engines' ports open to the control planes only.

The control planes are the addresses join learns (the join answer's list and
the code's own); each is reduced to its host, and a host name is resolved to
its addresses here, so the table names IP addresses only. The engines' port
range is the agent's `engine_ports` (its default: join's agent.yaml sets none).

On a machine that is a control plane too (server.yaml is there), the table
`llmgw server init` wrote is kept: it is that machine's, and a node's table
would replace it.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Callable, Sequence

from llmgw.install import firewall
from llmgw.install.layout import Layout
from llmgw.install.manifest import Manifest, make_dirs

__all__ = ["engine_ports", "plane_networks", "node_ruleset", "firewall_plan", "install_node_firewall"]


def engine_ports() -> str:
    """The agent's engine port range: its `engine_ports` default, which join's agent.yaml leaves as it is."""
    import attrs

    from llmgw.config.agent import AgentConfig

    return str(attrs.fields_dict(AgentConfig)["engine_ports"].default)


def _host(address: str) -> str:
    """The host of `host:port`, `[v6]:port` or `https://host:port/...`."""
    text = address.strip()
    if "://" in text:
        return urllib.parse.urlsplit(text).hostname or ""
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") == 1:
        return text.partition(":")[0]
    return text


def plane_networks(addresses: Sequence[str], say: Callable[[str], None] = lambda line: None) -> list[str]:
    """Each control plane's IP addresses, in order, names resolved; one that does not resolve is said and left out."""
    out: list[str] = []
    for address in addresses:
        host = _host(address)
        try:
            found = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError) as exc:
                say(f"firewall: the control plane {address}: its name does not resolve here ({exc}); "
                    "the engines' ports are not opened to it")
                continue
            found = [str(ipaddress.ip_address(info[4][0].split("%")[0])) for info in infos]
        for ip in found:
            if ip not in out:
                out.append(ip)
    return out


def node_ruleset(planes: Sequence[str], node: str, ports: str | None = None) -> str:
    """The nft file for node `node`: the engine ports open to `planes` (IP addresses) only."""
    openings = firewall.node_openings(planes, ports or engine_ports())
    return firewall.ruleset(openings, title=f"the node {node}")


def firewall_plan(layout: Layout, text: str, wanted: bool) -> list[str]:
    """The lines a dry run shows: the file, its rules and whether it would be applied."""
    if not wanted:
        return ["firewall: left alone (--no-firewall)"]
    kept = _kept(layout)
    if kept:
        return [kept]
    lines = [f"== {layout.nft}", text.rstrip("\n")]
    lines.append("applied with nft -f" if firewall.firewall_applies(layout) else
                 "not applied: " + firewall.skip_reason(layout))
    return lines


def _kept(layout: Layout) -> str:
    """Why the file on this machine is left as it is, or '' when join writes it."""
    if not layout.nft.exists():
        return ""
    if layout.server_yaml.exists():
        return (f"{layout.nft}: kept (this machine is a control plane: its table is `llmgw server init`'s); "
                "the engines' ports are not closed off")
    if not layout.nft.read_text(encoding="utf-8").startswith(firewall.HEADER):
        return f"{layout.nft}: kept (not written by llmgw); the table is not applied"
    return ""


def install_node_firewall(layout: Layout, manifest: Manifest, text: str, say: Callable[[str], None]) -> None:
    """Write the table's file, listed for `llmgw wipe`, and apply it where init would; FirewallError from nft."""
    kept = _kept(layout)
    if kept:
        say(kept)
        return
    old = layout.nft.read_text(encoding="utf-8") if layout.nft.exists() else None
    if old == text:
        say(f"{layout.nft}: unchanged")
    else:
        if not layout.nft.parent.exists():
            make_dirs(manifest, layout.nft.parent, 0o755, ours=False)
        layout.nft.write_text(text, encoding="utf-8")
        manifest.add_file(layout.nft)
        manifest.save()
        say(f"{layout.nft}: {'replaced' if old is not None else 'wrote'} the table {firewall.TABLE}")
    if firewall.firewall_applies(layout):
        firewall.apply_ruleset(layout.nft)
        manifest.firewall = True
        manifest.save()
        say(f"firewall: table {firewall.TABLE} applied (nft -f)")
    else:
        say("firewall: not applied: " + firewall.skip_reason(layout))
