"""An HTTP client for fetching from the internet that cannot be turned inward.

The mirror fetches what an operator (or the control plane, through the API)
names. Without care that is a way to make the mirror machine read from
inside the network: a URL or a redirect to `127.0.0.1`, the metadata
service at `169.254.169.254`, a private address, or an IPv6 address that
carries one of those inside it (NAT64 `64:ff9b::/96`, 6to4 `2002::/16`,
Teredo, IPv4-mapped). Every address a name resolves to is checked at
connection time, so a name that resolves differently the second time gains
nothing, and every redirect hop is checked again. `allow_private=True` turns
the checks off, for a registry inside the network (and for tests).

Sizes are capped (`max_json_bytes` for API answers; downloads are capped by
their callers), connections and reads time out, no proxy is taken from the
environment, and an `Authorization` header never follows a redirect to
another host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
from typing import Any, AsyncIterator, Callable
from urllib.parse import urljoin

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_SHARED_V4 = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT


class BlockedAddress(ValueError):
    """A URL or redirect that leads to an address the mirror must not fetch from."""


class FetchError(Exception):
    """A fetch that failed for a reason worth one line to the operator."""


class OfflineRefused(FetchError):
    """A fetch from outside on a site that is offline: refused before any connection, naming the setting."""


def forbidden_reason(address: str) -> str | None:
    """Why `address` may not be fetched from, or None when it is a public address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            inner = forbidden_reason(str(embedded))
            return f"{ip} carries {embedded}: {inner}" if inner else None
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is link-local (cloud metadata lives there)"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return f"{ip} is not a unicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_V4:
        return f"{ip} is in the carrier-grade NAT range"
    if ip.is_private or not ip.is_global:
        return f"{ip} is a private address"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address, obfuscated in the last 32 bits
    if ip in _SIXTOFOUR:
        return ip.sixtofour
    for net in _NAT64:
        if ip in net:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


class _CheckingResolver(AbstractResolver):
    """Resolves as usual, then drops every address that may not be fetched from."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results if forbidden_reason(r["host"]) is None]
        if not allowed:
            reasons = "; ".join(forbidden_reason(r["host"]) or "" for r in results)
            raise BlockedAddress(f"{host} resolves only to addresses the mirror does not fetch from ({reasons})")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def check_url(url: str, *, allow_private: bool) -> yarl.URL:
    """Refuse anything but http(s), credentials in the URL, and (unless allowed) private literals."""
    parsed = yarl.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise BlockedAddress(f"{url}: only http:// and https:// URLs are fetched")
    if parsed.user or parsed.password:
        raise BlockedAddress(f"{parsed.with_user(None)}: credentials in a URL are refused; use HF_TOKEN")
    if not allow_private:
        host = parsed.host.strip("[]")
        if host.lower() == "localhost" or host.lower().endswith(".localhost"):
            raise BlockedAddress(f"{url}: {host} is this machine")
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return parsed  # a name: its addresses are checked when connecting
        reason = forbidden_reason(host)
        if reason:
            raise BlockedAddress(f"{url}: {reason} (--allow-private fetches from it anyway)")
    return parsed


class SafeFetcher:
    """An aiohttp session that follows redirects only to places it may fetch from."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        connect_timeout: float = 30.0,
        read_timeout: float = 120.0,
        max_redirects: int = 5,
        max_json_bytes: int = 16 << 20,
        user_agent: str = "llmgw-mirror",
        offline: str | Callable[[], str] = "",
    ) -> None:
        self.allow_private = allow_private
        #: why this site fetches nothing from outside (the setting that says so), or what says it at each
        #: fetch; empty fetches
        self.offline = offline
        self.max_redirects = max_redirects
        self.max_json_bytes = max_json_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self._headers = {"User-Agent": user_agent}
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = None if self.allow_private else _CheckingResolver()
            connector = aiohttp.TCPConnector(resolver=resolver, limit=32, ttl_dns_cache=60)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=self._headers, trust_env=False
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SafeFetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def get(self, url: str, headers: dict[str, str] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET `url`, following checked redirects; yields the final response, unread."""
        offline = self.offline() if callable(self.offline) else self.offline
        if offline:
            raise OfflineRefused(f"{_strip_query(url)}: not fetched: {offline}")
        headers = dict(headers or {})
        current = check_url(url, allow_private=self.allow_private)
        for _ in range(self.max_redirects + 1):
            response = await self.session.get(current, headers=headers, allow_redirects=False)
            location = response.headers.get("Location")
            if response.status not in (301, 302, 303, 307, 308) or not location:
                try:
                    yield response
                finally:
                    response.release()
                return
            response.release()
            target = check_url(urljoin(str(current), location), allow_private=self.allow_private)
            if current.scheme == "https" and target.scheme != "https":
                raise BlockedAddress(f"{current} redirects to {target}: from https to plain http is refused")
            if target.origin() != current.origin():
                headers.pop("Authorization", None)
            current = target
        raise FetchError(f"{url}: more than {self.max_redirects} redirects")

    async def get_json(self, url: str, headers: dict[str, str] | None = None) -> Any:
        async with self.get(url, headers) as response:
            if response.status != 200:
                raise FetchError(f"{_strip_query(url)}: HTTP {response.status} {response.reason or ''}".rstrip())
            length = response.content_length
            if length is not None and length > self.max_json_bytes:
                raise FetchError(f"{_strip_query(url)}: answer of {length} bytes is more than {self.max_json_bytes}")
            body = await response.content.read(self.max_json_bytes + 1)
            if len(body) > self.max_json_bytes:
                raise FetchError(f"{_strip_query(url)}: answer is more than {self.max_json_bytes} bytes")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise FetchError(f"{_strip_query(url)}: not JSON ({exc})") from exc


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]
