"""llmgw's own nftables table, `table inet llmgw`: which of its ports are open to whom.

The table has one input chain with policy accept, and only drops traffic to
llmgw's own ports from where it should not come. nftables' drop is final
across tables while accept is not, so this table can close llmgw's ports
but never opens anything another table closes, and never touches ssh or
any other service: the machine's own firewall stays the operator's.

On a control plane:

- the client API (`listen`) is open to everyone;
- the agent port (`agent_listen`) to the nodes' networks (`--nodes-from`,
  everyone when none is given: mutual TLS guards it);
- the admin API (`admin_listen`) to loopback only, unless `--admin-from CIDR`;
- metrics (`metrics_listen`) to loopback and `--metrics-from`;
- a mirror on this machine: its files to the nodes' networks, its API to loopback.

On a node, the engines' ports (`engine_ports`) are open to the control
planes only: the router is the only client an engine should have.

The file starts by deleting the table it then defines, so `nft -f FILE`
replaces the table whole, atomically, however often it is applied.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs

from llmgw.install.layout import Layout

__all__ = [
    "FirewallError",
    "Opening",
    "TABLE",
    "parse_networks",
    "ruleset",
    "control_plane_openings",
    "node_openings",
    "check_ruleset",
    "apply_ruleset",
    "remove_table",
    "table_applied",
    "firewall_applies",
    "skip_reason",
]

TABLE = "inet llmgw"
HEADER = "# Written by llmgw (`llmgw docs install`, Firewall); `llmgw wipe` removes it and the table."
LOOPBACK_ONLY: tuple[str, ...] = ()
EVERYONE = ("0.0.0.0/0", "::/0")


class FirewallError(Exception):
    """The table cannot be checked, applied or removed; the message says what nft said."""


@attrs.frozen
class Opening:
    """One port (or range, like 20000-20999) and who may reach it beyond loopback.

    `sources` empty: loopback only; EVERYONE: open."""

    port: str
    what: str
    sources: tuple[str, ...] = EVERYONE


def parse_networks(values: Sequence[str], flag: str) -> tuple[str, ...]:
    """Addresses or CIDR networks, normalised; ValueError naming the flag and the value otherwise."""
    out: list[str] = []
    for raw in values:
        text = raw.strip()
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(
                f"{flag} {raw!r}: not an address or a network; write one like 10.0.0.0/24 or 192.0.2.7"
            ) from None
        if str(net) not in out:
            out.append(str(net))
    return tuple(out)


def _port(address: str) -> str:
    from llmgw.config.validate import split_address

    _, port = split_address(address)
    return str(port)


def control_plane_openings(
    *,
    listen: str,
    admin_listen: str,
    agent_listen: str,
    metrics_listen: str,
    admin_from: Sequence[str] = (),
    nodes_from: Sequence[str] = (),
    metrics_from: Sequence[str] = (),
    mirror_listen: str = "",
    mirror_api_listen: str = "",
) -> list[Opening]:
    """A control plane's ports (config addresses like :8080), each with who may reach it."""
    nodes = tuple(nodes_from) or EVERYONE
    openings = [
        Opening(_port(listen), "client API"),
        Opening(_port(agent_listen), "agent port (mutual TLS)", nodes),
        Opening(_port(admin_listen), "admin API", tuple(admin_from)),
    ]
    if metrics_listen:
        openings.append(Opening(_port(metrics_listen), "metrics", tuple(metrics_from)))
    if mirror_listen:
        openings.append(Opening(_port(mirror_listen), "mirror files", nodes))
    if mirror_api_listen:
        openings.append(Opening(_port(mirror_api_listen), "mirror API", LOOPBACK_ONLY))
    return openings


def node_openings(control_planes: Sequence[str], engine_ports: str = "20000-20999") -> list[Opening]:
    """A node's engine ports, open to the control planes' addresses only (IP addresses or CIDRs)."""
    first, _, last = engine_ports.partition("-")
    ports = f"{int(first)}-{int(last or first)}"
    return [Opening(ports, "engines (the control planes' routers only)",
                    parse_networks(control_planes, "control plane address"))]


def _family_lists(sources: Sequence[str]) -> tuple[list[str], list[str]]:
    v4, v6 = [], []
    for s in sources:
        (v6 if ipaddress.ip_network(s, strict=False).version == 6 else v4).append(s)
    return v4, v6


def ruleset(openings: Sequence[Opening], *, title: str = "") -> str:
    """The nft file: delete-then-define `table inet llmgw`, one accept/drop pair per closed port."""
    lines = [HEADER]
    if title:
        lines.append(f"# {title}")
    lines += [
        "",
        f"table {TABLE}",  # so the delete below finds a table the first time too
        f"delete table {TABLE}",
        "",
        f"table {TABLE} {{",
        "\tchain input {",
        "\t\ttype filter hook input priority filter; policy accept;",
        '\t\tiif "lo" accept',
    ]
    for o in openings:
        port = o.port
        comment = o.what.replace('"', "'")
        if o.sources == EVERYONE or set(EVERYONE) <= set(o.sources):
            lines.append(f'\t\ttcp dport {port} accept comment "{comment}: open"')
            continue
        v4, v6 = _family_lists(o.sources)
        if v4:
            lines.append(f'\t\ttcp dport {port} ip saddr {{ {", ".join(v4)} }} accept comment "{comment}"')
        if v6:
            lines.append(f'\t\ttcp dport {port} ip6 saddr {{ {", ".join(v6)} }} accept comment "{comment}"')
        who = "loopback only" if not o.sources else "closed to everyone else"
        lines.append(f'\t\ttcp dport {port} drop comment "{comment}: {who}"')
    lines += ["\t}", "}", ""]
    return "\n".join(lines)


def _nft(args: Sequence[str], *, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    nft = shutil.which("nft")
    if nft is None:
        raise FirewallError("nft is not installed (apt-get install nftables)")
    argv = [nft, *args]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise FirewallError(f"`{' '.join(argv)}` did not finish within 30 s") from None


def check_ruleset(path: Path) -> None:
    """`nft -c -f FILE`: the file parses and would apply; FirewallError with nft's words otherwise."""
    done = _nft(["-c", "-f", str(path)])
    if done.returncode != 0:
        raise FirewallError(f"nft refuses {path}: {(done.stderr or done.stdout).strip()}")


def apply_ruleset(path: Path, *, netns: str | None = None) -> None:
    """`nft -f FILE`: replace the table with the file's."""
    done = _nft(["-f", str(path)], netns=netns)
    if done.returncode != 0:
        raise FirewallError(f"`nft -f {path}` failed: {(done.stderr or done.stdout).strip()}")


def table_applied(*, netns: str | None = None) -> bool:
    try:
        return _nft(["list", "table", *TABLE.split()], netns=netns).returncode == 0
    except FirewallError:
        return False


def remove_table(*, netns: str | None = None) -> bool:
    """Delete `table inet llmgw`; True when there was one."""
    if not table_applied(netns=netns):
        return False
    done = _nft(["delete", "table", *TABLE.split()], netns=netns)
    if done.returncode != 0:
        raise FirewallError(f"`nft delete table {TABLE}` failed: {(done.stderr or done.stdout).strip()}")
    return True


def firewall_applies(layout: Layout) -> bool:
    """Whether init applies the table: on the machine itself (not --root) where nft is installed."""
    return layout.system and shutil.which("nft") is not None


def skip_reason(layout: Layout) -> str:
    """Why the table is written but not applied (the sentence after "not applied: ")."""
    if not layout.system:
        return f"--root {layout.root} is not this machine's firewall (the file is written)"
    return "nft is not installed (apt-get install nftables), the file is written"
