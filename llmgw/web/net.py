"""Who is asking and how: the client's address, TLS, the portal's own address.

`X-Forwarded-For`, `-Proto` and `-Host` are believed only from a peer in
`router.trusted_proxies`; from anyone else they are ignored, so a visitor
cannot choose the address the sign-in throttle counts them under, or make
a cookie lose its Secure flag.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str]) -> list[Network]:
    """`10.0.0.5`, `10.0.0.0/8`, `::1` as networks; a malformed entry is an error naming it."""
    out: list[Network] = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"router.trusted_proxies: {entry!r} is not an address or a network like 10.0.0.0/8") from None
    return out


def _ip(text: str | None):
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(addr, networks: Sequence[Network]) -> bool:
    return addr is not None and any(addr in n for n in networks)


def peer_is_trusted(request: web.Request, networks: Sequence[Network]) -> bool:
    return _trusted(_ip(request.remote), networks)


def client_address(request: web.Request, networks: Sequence[Network]) -> str:
    """The client's address: the peer's, or, behind a trusted proxy, the last
    address in X-Forwarded-For that is not itself a trusted proxy."""
    peer = _ip(request.remote)
    if not _trusted(peer, networks):
        return str(peer) if peer is not None else (request.remote or "")
    hops = [h.strip() for h in ",".join(request.headers.getall("X-Forwarded-For", [])).split(",") if h.strip()]
    for hop in reversed(hops):
        addr = _ip(hop)
        if addr is None:
            break  # a malformed hop: stop believing the header here
        if not _trusted(addr, networks):
            return str(addr)
    return str(peer)


def is_secure(request: web.Request, networks: Sequence[Network]) -> bool:
    """True when the browser reached us over TLS: directly, or through a trusted proxy that says so."""
    if request.secure:
        return True
    if peer_is_trusted(request, networks):
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return proto == "https"
    return False


def public_base(request: web.Request, networks: Sequence[Network]) -> str:
    """`https://llm.example.com` as the browser sees this gateway, for the
    snippets shown to the person asking (never for links mailed to others)."""
    scheme = "https" if is_secure(request, networks) else "http"
    host = request.host
    if peer_is_trusted(request, networks):
        forwarded = request.headers.get("X-Forwarded-Host", "").split(",")[0].strip()
        if forwarded:
            host = forwarded
    if not host or any(c in host for c in "/\\@ \"'<>"):
        host = "localhost"
    return f"{scheme}://{host}"


def local_path(value: str | None, default: str = "/account") -> str:
    """A `next=` target, kept only when it is a path on this site (no `//host`, no scheme)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if any(ord(c) < 32 for c in value):
        return default
    return value
