"""The agent port's transport: a WebSocket at /agent/v1, one msgpack message per binary frame.

Two ends, one link underneath:

- `AgentEndpoint` (control plane) serves `/agent/v1`. With mutual TLS the
  node's id is its certificate's common name, and a `Register` naming
  another node, or a revoked certificate, is answered `Refused`. Without
  TLS (`insecure=True`) it only takes agents on loopback.
- `AgentConnection` (agent) dials a list of control-plane URLs in turn,
  moving to the next when one fails and backing off after a whole round;
  a `ControlPlanes` message replaces the list.

Each accepted connection is handed to the caller's `on_session(session)`
coroutine, which owns it: it sends with `await session.send(msg)` and reads
with `async for msg in session`; the loop ends when the connection does
(`session.close_reason` says why), and returning closes the connection.

Liveness: when nothing has arrived for `ping_interval` seconds a ping goes
out, and a peer that sends nothing within `pong_timeout` after it is taken
for dead: with 10 s and 5 s, a peer whose machine stopped is found in ~15 s.
This is transport only: what the messages mean is the caller's business.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import ssl
from typing import Any, Awaitable, Callable, Mapping, Sequence

import aiohttp
import attrs
from aiohttp import web
from yarl import URL

from llmgw.pki.certs import InvalidName, common_name, validate_node_id
from llmgw.pki.tls import RevocationList, peer_certificate
from llmgw.wire.codec import WireError, check_peer_protocol
from llmgw.wire.versions import agent_refusal  # versions checked at Register
from llmgw.wire.link import (
    MAX_FRAME_BYTES,
    PATH,
    PING_INTERVAL,
    PONG_TIMEOUT,
    ConnectionClosed,
    Link,
    SessionBase,
    log_fields,
    maybe_await,
    run_session,
)
from llmgw.wire.messages import (
    AGENT_MESSAGES,
    CONTROL_MESSAGES,
    ControlPlanes,
    Refused,
    Register,
    Welcome,
)

__all__ = [
    "PATH",
    "PING_INTERVAL",
    "PONG_TIMEOUT",
    "ConnectionClosed",
    "Peer",
    "AgentSession",
    "AgentEndpoint",
    "ControlPlaneSession",
    "AgentConnection",
    "agent_url",
]

log = logging.getLogger("llmgw.wire")

_CLOSE_POLICY = 1008  # WebSocket "policy violation": what a refusal closes with
_CLOSE_GOING_AWAY = 1001

# --- Control-plane side -------------------------------------------------------


@attrs.frozen
class Peer:
    """Who is at the other end, as the transport knows it before any message."""

    address: str  #: host:port of the TCP peer
    common_name: str | None = None  #: the client certificate's, under mutual TLS
    serial: int | None = None


class AgentSession(SessionBase):
    """A registered agent, as the control plane sees it."""

    def __init__(self, link: Link, register: Register, peer: Peer) -> None:
        super().__init__(link)
        self.node_id = register.node_id
        self.register = register
        self.peer = peer

    async def send(self, msg: Any) -> None:
        """Send a control-plane message; ConnectionClosed once the agent is gone."""
        await self._link.send(msg)

    def __repr__(self) -> str:
        return f"<AgentSession {self.node_id} from {self.peer.address}{' closed' if self.closed else ''}>"


Revocations = RevocationList | Callable[[], RevocationList | Awaitable[RevocationList]]
RegisterCheck = Callable[[Register, Peer], "str | Refused | None | Awaitable[str | Refused | None]"]


class AgentEndpoint:
    """Serves `/agent/v1`: checks who connects, takes their Register, and hands sessions to `on_session`."""

    def __init__(
        self,
        on_session: Callable[[AgentSession], Awaitable[None]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        insecure: bool = False,
        revocations: Revocations | None = None,
        on_register: RegisterCheck | None = None,
        heartbeat_interval: float = 5.0,
        epoch: int = 0,
        ping_interval: float = PING_INTERVAL,
        pong_timeout: float = PONG_TIMEOUT,
        register_timeout: float = 10.0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        welcome_extra: Callable[[Register], Mapping[str, Any] | Awaitable[Mapping[str, Any]]] | None = None,
        extra_routes: Sequence[web.RouteDef] = (),
    ) -> None:
        if ssl_context is None and not insecure:
            raise ValueError(
                "the agent port needs mutual TLS: give an ssl context (llmgw.pki.ssl_server_context) "
                "or insecure=True, which only takes agents on loopback"
            )
        # With extra routes (the join endpoint, for machines that have no certificate yet) the
        # context may only ask for a client certificate; /agent/v1 still refuses a connection without one.
        allowed = (ssl.CERT_REQUIRED, ssl.CERT_OPTIONAL) if extra_routes else (ssl.CERT_REQUIRED,)
        if ssl_context is not None and ssl_context.verify_mode not in allowed:
            raise ValueError("the agent port's ssl context must require client certificates (CERT_REQUIRED)")
        self._on_session = on_session
        self.ssl_context = ssl_context
        self._revocations = revocations
        self._on_register = on_register
        self.heartbeat_interval = heartbeat_interval
        self.epoch = epoch  #: sent in each Welcome; the leader raises it on take-over
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._register_timeout = register_timeout
        self._max_frame_bytes = max_frame_bytes
        self._sessions: dict[str, AgentSession] = {}
        self._runner: web.AppRunner | None = None
        self._welcome_extra = welcome_extra
        self._extra_routes = list(extra_routes)

    @property
    def sessions(self) -> Mapping[str, AgentSession]:
        """The connected, registered agents by node id (one that just went is left out at once)."""
        return {node: s for node, s in self._sessions.items() if not s.closed}

    def routes(self) -> list[web.RouteDef]:
        """The route to add to an application served with this endpoint's ssl context."""
        return [web.get(PATH, self.handle), *self._extra_routes]

    async def start(self, host: str, port: int) -> int:
        """Serve on host:port on a runner of its own; returns the bound port (useful with port 0)."""
        if self.ssl_context is None and not _is_loopback(host):
            raise ValueError(
                f"refusing to serve the agent port without TLS on {host!r}: insecure mode listens on "
                "loopback only (127.0.0.1 or ::1)"
            )
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.ssl_context)
        await site.start()
        return self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Close every session, then stop serving."""
        sessions = list(self._sessions.values())
        await asyncio.gather(
            *(s._link.close("the control plane is stopping", code=_CLOSE_GOING_AWAY) for s in sessions),
            return_exceptions=True,
        )
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def broadcast(self, msg: Any) -> None:
        """Send one message to every connected agent (a ControlPlanes change, say); gone ones are skipped."""
        for session in list(self._sessions.values()):
            try:
                await session.send(msg)
            except ConnectionClosed:
                pass

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = await self._identify(request)
        if isinstance(peer, web.Response):
            return peer
        ws = web.WebSocketResponse(
            autoping=False, timeout=self._pong_timeout, max_msg_size=self._max_frame_bytes
        )
        await ws.prepare(request)
        link = Link(
            ws, peer=peer.address, expect=AGENT_MESSAGES,
            ping_interval=self._ping_interval, pong_timeout=self._pong_timeout,
        )
        if peer.common_name is not None:
            revoked = await self._revoked(request)
            if revoked:
                await self._refuse(link, peer, revoked)
                return ws
        try:
            first = await link.next_message(timeout=self._register_timeout, strict=True)
        except asyncio.TimeoutError:
            await self._refuse(link, peer, f"no register within {self._register_timeout:g} s")
            return ws
        except WireError as exc:
            await self._refuse(link, peer, f"the first message must be a register: {exc}")
            return ws
        if first is None:
            return ws
        reason = await self._check(first, peer)
        if reason is not None:
            await self._refuse(link, peer, reason)
            return ws

        session = AgentSession(link, first, peer)
        old = self._sessions.get(session.node_id)
        if old is not None:
            await old.close("replaced by a newer connection from the same node")
        self._sessions[session.node_id] = session
        log.info("agent registered", extra=log_fields(node_id=session.node_id, peer=peer.address))
        try:
            extra = dict(await maybe_await(self._welcome_extra(first))) if self._welcome_extra else {}
            await link.send(Welcome(
                node_id=session.node_id, heartbeat_interval=self.heartbeat_interval, epoch=self.epoch, **extra,
            ))
            await run_session(link, self._on_session, session, grace=self._pong_timeout)
        except ConnectionClosed:
            pass
        finally:
            if self._sessions.get(session.node_id) is session:
                del self._sessions[session.node_id]
            log.info("agent disconnected", extra=log_fields(
                node_id=session.node_id, peer=peer.address, reason=link.close_reason))
        return ws

    async def _identify(self, request: web.Request) -> Peer | web.Response:
        address = _peer_address(request)
        if self.ssl_context is None:
            if not _is_loopback(request.remote or ""):
                return web.Response(status=403, text="the agent port runs without TLS and takes only local agents\n")
            return Peer(address=address)
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        if ssl_object is None:
            return web.Response(status=403, text="the agent port needs TLS with a client certificate\n")
        cert = peer_certificate(ssl_object)
        if cert is None:
            return web.Response(status=403, text="a client certificate from the cluster's CA is required\n")
        request["llmgw.peer_certificate"] = cert
        return Peer(address=address, common_name=common_name(cert) or "", serial=cert.serial_number)

    async def _revoked(self, request: web.Request) -> str | None:
        if self._revocations is None:
            return None
        revocations = self._revocations
        if callable(revocations):
            revocations = await maybe_await(revocations())
        return revocations.reason(request["llmgw.peer_certificate"])

    async def _check(self, first: Any, peer: Peer) -> str | None:
        if not isinstance(first, Register):
            return f"the first message must be a register, got {first.type!r}"
        try:
            validate_node_id(first.node_id)
        except InvalidName as exc:
            return str(exc)
        if peer.common_name is not None and first.node_id != peer.common_name:
            return (
                f"this certificate is node {peer.common_name!r}'s; it cannot register as {first.node_id!r}"
            )
        problem = agent_refusal(first.protocol, first.agent_version)  # versions checked at Register
        if problem is not None:
            return problem
        if self._on_register is not None:
            verdict = await maybe_await(self._on_register(first, peer))
            if isinstance(verdict, Refused):
                return verdict.reason
            if verdict:
                return str(verdict)
        return None

    async def _refuse(self, link: Link, peer: Peer, reason: str) -> None:
        log.warning("agent refused: %s", reason, extra=log_fields(peer=peer.address, cn=peer.common_name))
        try:
            await link.send(Refused(reason=reason))
        except ConnectionClosed:
            pass
        await link.close(f"refused: {reason}", code=_CLOSE_POLICY)


def _peer_address(request: web.Request) -> str:
    info = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(info, tuple) and len(info) >= 2:
        host = info[0]
        return f"[{host}]:{info[1]}" if ":" in host else f"{host}:{info[1]}"
    return request.remote or "?"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- Agent side ---------------------------------------------------------------


class ControlPlaneSession(SessionBase):
    """The agent's connection to one control plane, after its Welcome."""

    def __init__(self, link: Link, url: str, welcome: Welcome) -> None:
        super().__init__(link)
        self.url = url
        self.welcome = welcome

    async def send(self, msg: Any) -> None:
        """Send an agent message; ConnectionClosed once the control plane is gone."""
        await self._link.send(msg)

    def __repr__(self) -> str:
        return f"<ControlPlaneSession {self.url}{' closed' if self.closed else ''}>"


def agent_url(address: str, *, tls: bool = True) -> str:
    """A control plane's agent URL from `host:port` or a URL: `host:7443` -> `wss://host:7443/agent/v1`."""
    text = address.strip()
    if "://" not in text:
        text = f"{'wss' if tls else 'ws'}://{text}"
    url = URL(text)
    scheme = {"https": "wss", "http": "ws"}.get(url.scheme, url.scheme)
    if scheme not in ("ws", "wss") or not url.host:
        raise ValueError(f"{address!r} is not a control plane's address: give host:port or wss://host:port{PATH}")
    url = url.with_scheme(scheme)
    if url.path in ("", "/"):
        url = url.with_path(PATH)
    return str(url)


#: An agent's first wait before dialling again, doubled after each failed round up to BACKOFF_MAX (seconds),
#: each wait jittered down to half: a control plane that restarts is found again within a second of being back.
BACKOFF_INITIAL = 0.25
BACKOFF_MAX = 1.0


class AgentConnection:
    """The agent's side: stays connected to one of the control planes, trying each in turn."""

    def __init__(
        self,
        urls: Sequence[str],
        register: Callable[[], Register | Awaitable[Register]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        ping_interval: float = PING_INTERVAL,
        pong_timeout: float = PONG_TIMEOUT,
        connect_timeout: float = 5.0,
        welcome_timeout: float = 10.0,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        on_control_planes: Callable[[tuple[str, ...]], Any] | None = None,
    ) -> None:
        self._tls = ssl_context is not None
        self._urls = self._normalise(urls)
        self._register = register
        self._ssl = ssl_context
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._connect_timeout = connect_timeout
        self._welcome_timeout = welcome_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._max_frame_bytes = max_frame_bytes
        self._on_control_planes = on_control_planes
        self._index = 0
        self._current: str | None = None
        self._stopping = asyncio.Event()
        self.session: ControlPlaneSession | None = None  #: the open session, when there is one
        self.last_error: str | None = None  #: why the last attempt or session ended

    @property
    def urls(self) -> tuple[str, ...]:
        return self._urls

    def set_urls(self, urls: Sequence[str]) -> None:
        """Replace the list of control planes; the next dial uses it.

        Addresses that are not ones are left out; a list with none left is ignored.
        """
        new = self._normalise(urls, strict=False)
        if not new:
            log.warning("ignored a list of control planes with no usable address",
                        extra=log_fields(addresses=list(urls)))
            return
        self._urls = new
        # Carry on from where the agent is: the one after the current control plane.
        self._index = new.index(self._current) if self._current in new else -1

    async def run(self, on_session: Callable[[ControlPlaneSession], Awaitable[None]]) -> None:
        """Connect, hand each session to `on_session`, reconnect; returns after `stop()`."""
        self._stopping.clear()
        attempt = 0
        timeout = aiohttp.ClientTimeout(total=None, connect=self._connect_timeout, sock_connect=self._connect_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not self._stopping.is_set():
                urls = self._urls
                self._index %= len(urls)
                url = urls[self._index]
                answered = await self._attempt(http, url, on_session)
                if self._stopping.is_set():
                    break
                self._index += 1
                # A session that was welcomed was a connection that worked: the
                # backoff starts again, so each failover is as quick as the first.
                attempt = 1 if answered else attempt + 1
                urls = self._urls
                # No wait when another address remains in this round: the delay
                # is there not to hammer one control plane.
                if len(urls) > 1 and self._index % len(urls) != 0:
                    delay = 0.0
                else:
                    delay = min(self._backoff_max, self._backoff_initial * 2 ** (attempt - 1))
                    # Jittered, so agents that lost one control plane together do not all dial at once.
                    delay *= random.uniform(0.5, 1.0)
                log.warning("no control plane session, trying the next", extra=log_fields(
                    error=self.last_error, next=urls[self._index % len(urls)], delay_s=round(delay, 3)))
                if delay > 0:
                    try:
                        await asyncio.wait_for(self._stopping.wait(), delay)
                    except asyncio.TimeoutError:
                        pass

    async def stop(self) -> None:
        """End `run()`: close the session if one is open."""
        self._stopping.set()
        if self.session is not None:
            await self.session.close("the agent is stopping")

    async def _attempt(
        self, http: aiohttp.ClientSession, url: str, on_session: Callable[[ControlPlaneSession], Awaitable[None]]
    ) -> bool:
        self._current = url
        try:
            async with asyncio.timeout(self._connect_timeout):
                ws = await http.ws_connect(
                    url,
                    ssl=self._ssl if self._ssl is not None else True,
                    autoping=False,
                    max_msg_size=self._max_frame_bytes,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self._pong_timeout),
                )
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            self.last_error = f"{url}: {_describe_dial_error(exc, self._connect_timeout)}"
            return False
        link = Link(
            ws, peer=url, expect=CONTROL_MESSAGES,
            ping_interval=self._ping_interval, pong_timeout=self._pong_timeout,
        )
        try:
            await link.send(await maybe_await(self._register()))
            first = await link.next_message(timeout=self._welcome_timeout, strict=True)
        except asyncio.TimeoutError:
            first, problem = None, f"no welcome within {self._welcome_timeout:g} s"
        except WireError as exc:
            first, problem = None, f"no welcome: {exc}"
        else:
            problem = None
            if first is None:
                problem = f"closed before a welcome: {link.close_reason}"
            elif isinstance(first, Refused):
                problem = f"refused: {first.reason}"
            elif not isinstance(first, Welcome):
                problem = f"the first message was {first.type!r}, not a welcome"
            else:
                problem = check_peer_protocol(first.protocol)
        if problem is not None or not isinstance(first, Welcome):
            self.last_error = f"{url}: {problem}"
            await link.close(problem or "no welcome")
            return False

        if self._stopping.is_set():  # stop() came while dialling
            await link.close("the agent is stopping")
            return True
        session = ControlPlaneSession(link, url, first)
        link.on_message = self._observe
        self.session = session
        log.info("connected to a control plane", extra=log_fields(url=url, node_id=first.node_id))
        try:
            await run_session(link, on_session, session, grace=self._pong_timeout)
        finally:
            self.session = None
        self.last_error = f"{url}: {link.close_reason}"
        return True

    def _observe(self, msg: Any) -> None:
        if isinstance(msg, ControlPlanes):
            self.set_urls(msg.addresses)
            if self._on_control_planes is not None:
                self._on_control_planes(self._urls)

    def _normalise(self, urls: Sequence[str], *, strict: bool = True) -> tuple[str, ...]:
        if isinstance(urls, str):
            urls = [urls]
        out: list[str] = []
        for u in urls:
            try:
                url = agent_url(u, tls=self._tls)
            except ValueError:
                if strict:
                    raise
                log.warning("left out a control plane address", extra=log_fields(address=u))
                continue
            if url not in out:
                out.append(url)
        if not out and strict:
            raise ValueError("an agent needs at least one control plane address")
        return tuple(out)


def _describe_dial_error(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"no connection within {timeout:g} s"
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return f"the server answered {exc.status} {exc.message} instead of a WebSocket"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its certificate is not trusted: {exc.certificate_error}"
    return f"{type(exc).__name__}: {exc}"
