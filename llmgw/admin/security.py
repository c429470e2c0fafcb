"""What every request must be before a handler sees it.

In order, each refused with `{"error": "…"}`:

1. `Host` must be an address (or `localhost`), not a DNS name (403): a page
   elsewhere cannot reach the API by rebinding its name to 127.0.0.1.
2. No cross-site request (403): an `Origin` of another host, or a
   `Sec-Fetch-Site` other than `same-origin` or `none`.
3. The token, as `Authorization: Bearer …` (401), compared in constant time.
4. A change (POST, PUT, PATCH, DELETE) must say `Content-Type:
   application/json` (415), which a form post from a page cannot.
5. `X-Llmgw-Actor` (letters, digits, `._-@`, at most 64; `unknown` when
   absent) and `X-Llmgw-Via` (api, ctl, console, portal, cli) (400).

Refusals after the token check (4 and 5) of a change are recorded in the
audit log; earlier ones are logged only, since anyone who can reach the port
could send them.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from llmgw.admin import audit, oidc_bearer
from llmgw.admin.dispatch import ACTOR, PREFIX, VIA
from llmgw.admin.errors import ApiError, error_response, refusal_of
from llmgw.admin.state import ADMIN
from llmgw.admin.token import tokens_match

log = logging.getLogger("llmgw.admin")

ACTOR_HEADER = "X-Llmgw-Actor"
VIA_HEADER = "X-Llmgw-Via"
ACTOR_PATTERN = r"^[A-Za-z0-9._@-]{1,64}$"
_ACTOR = re.compile(ACTOR_PATTERN)
CHANGES = ("POST", "PUT", "PATCH", "DELETE")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SAFE_FETCH_SITES = ("same-origin", "none")


def split_host(value: str) -> tuple[str, int | None]:
    """`127.0.0.1:9090`, `[::1]:9090`, `localhost` as (host, port or None)."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        host, rest = value[1:end], value[end + 1:]
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = value.rpartition(":")
        if not sep or ":" in host:
            host, port = value, ""
    return host, (int(port) if port.isdigit() else None)


def is_address(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_host(request: web.Request) -> None:
    value = request.headers.get("Host")
    if value is None:
        return  # HTTP/1.0 without one: no browser sends that
    host, _ = split_host(value)
    if not is_address(host):
        raise ApiError(403, f"Host: {value!r} is a name; the admin API answers only to an address or "
                            "localhost (call http://127.0.0.1:9090, not a DNS name; behind a proxy, have it "
                            "send an address)")


def check_cross_site(request: web.Request) -> None:
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in _SAFE_FETCH_SITES:
        raise ApiError(403, f"Sec-Fetch-Site: {site!r}: a request another site made is refused")
    origin = request.headers.get("Origin")
    if origin is None:
        return
    parts = urlsplit(origin.strip())
    if origin.strip() == "null" or parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ApiError(403, f"Origin: {origin!r}: a request another site made is refused")
    host_value = request.headers.get("Host", request.host)
    host, port = split_host(host_value)
    port = port or _DEFAULT_PORTS.get(request.scheme, 80)
    try:
        origin_port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError:
        origin_port = -1
    if parts.hostname.lower() != host.lower().strip("[]") or origin_port != port:
        raise ApiError(403, f"Origin: {origin!r} is not this server ({host_value}): a request another site "
                            "made is refused")


def check_token(request: web.Request, expected: str) -> None:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if not header:
        raise ApiError(401, "no admin token: send Authorization: Bearer TOKEN (the token is in the server's "
                            "admin_token_file; llmgw ctl reads it from there or from LLMGW_ADMIN_TOKEN)")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(401, "Authorization: expected Bearer TOKEN")
    if not expected or not tokens_match(given.strip(), expected):
        raise ApiError(401, "the admin token is wrong: use the one in the server's admin_token_file")


def check_content_type(request: web.Request) -> None:
    if request.method not in CHANGES:
        return
    content_type = request.content_type.lower()
    if content_type != "application/json" and not content_type.endswith("+json"):
        given = request.headers.get("Content-Type", "none")
        raise ApiError(415, f"Content-Type: {given!r}; a change must be sent as application/json, even "
                            "a DELETE or a POST without a body")


def read_actor(request: web.Request) -> str:
    actor = request.headers.get(ACTOR_HEADER)
    if actor is None:
        return "unknown"
    if not _ACTOR.match(actor):
        raise ApiError(400, f"{ACTOR_HEADER}: {actor[:80]!r} is not a name of letters, digits and ._-@ "
                            "(at most 64)")
    return actor


def read_via(request: web.Request) -> str:
    via = request.headers.get(VIA_HEADER)
    if via is None:
        return "api"
    if via not in audit.VIAS:
        raise ApiError(400, f"{VIA_HEADER}: {via[:40]!r} is not one of {', '.join(audit.VIAS)}")
    return via


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def admin_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await _guarded(request, handler)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    admin = request.app[ADMIN]
    try:
        check_host(request)
        check_cross_site(request)
        try:
            check_token(request, admin.token)
        except ApiError as wrong:
            given = request.headers.get("Authorization", "").partition(" ")[2].strip()
            if wrong.status != 401 or not given or not admin.config.auth.oidc.issuer:
                raise
            # Not the admin token: perhaps a person's from the provider (llmgw ctl signin).
            request[oidc_bearer.PERSON] = await oidc_bearer.accept(request, admin, given)
    except ApiError as err:
        log.warning("admin API request refused: %s", err.message,
                    extra={"fields": {"method": request.method, "path": request.path, "peer": request.remote}})
        headers = {"WWW-Authenticate": 'Bearer realm="llmgw admin"'} if err.status == 401 else None
        return error_response(err, headers)
    try:
        request[ACTOR] = "unknown"
        request[VIA] = "api"
        check_content_type(request)
        request[ACTOR] = request.get(oidc_bearer.PERSON) or read_actor(request)
        request[VIA] = read_via(request)
    except ApiError as err:
        route = getattr(request.match_info.handler, "route", None)
        if route is not None and route.action:
            params = dict(request.match_info)
            await audit.record(admin.store, actor=request[ACTOR], via=request[VIA], action=route.action,
                               target=_target(route.target, params), fields=params, outcome="refused",
                               reason=err.message, status=err.status)
        return error_response(err)
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return error_response(ApiError(404, f"no endpoint {request.method} {request.path}; "
                                            f"GET {PREFIX}/openapi.json lists them"))
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return error_response(ApiError(405, f"{request.method} is not served at {request.path}; it takes {allowed}"),
                              {"Allow": allowed})
    except Exception as exc:  # noqa: BLE001 - a body too large, or a bug: still a JSON refusal
        return error_response(refusal_of(exc))


def _target(template: str, params: dict[str, str]) -> str:
    try:
        return template.format(**params)
    except (KeyError, IndexError):
        return template
