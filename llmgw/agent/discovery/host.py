"""The node's name and its addresses, without anything beyond the standard library."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

import attrs

_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


@attrs.frozen(kw_only=True)
class NetAddress:
    """One address the node has."""

    interface: str
    address: str
    family: int  #: 4 or 6


def hostname() -> str:
    """The node's fully qualified name where resolvable, else its short one."""
    name = socket.gethostname()
    try:
        fqdn = socket.getfqdn(name)
    except OSError:
        return name
    # getfqdn answers "localhost…" on a host whose name resolves to loopback.
    return fqdn if fqdn and not fqdn.startswith("localhost") else name


def _ipv4(interface: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError:
            return None  # down, or no IPv4 address
    return socket.inet_ntoa(raw[20:24])


def _ipv6(proc: str) -> list[tuple[str, str]]:
    """(interface, address) from /proc/net/if_inet6, global and unique-local only."""
    out = []
    try:
        with open(os.path.join(proc, "net/if_inet6")) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 6:
            continue
        addr = ipaddress.IPv6Address(bytes.fromhex(parts[0]))
        if addr.is_loopback or addr.is_link_local:
            continue
        out.append((parts[5], str(addr)))
    return out


def addresses(*, proc: str = "/proc") -> tuple[NetAddress, ...]:
    """The node's non-loopback addresses: IPv4 first, by interface name."""
    found: list[NetAddress] = []
    try:
        interfaces = sorted(name for _, name in socket.if_nameindex())
    except OSError:
        interfaces = []
    for name in interfaces:
        ip = _ipv4(name)
        if ip and not ipaddress.IPv4Address(ip).is_loopback:
            found.append(NetAddress(interface=name, address=ip, family=4))
    for name, ip in sorted(_ipv6(proc)):
        found.append(NetAddress(interface=name, address=ip, family=6))
    return tuple(found)
