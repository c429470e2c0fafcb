"""/scim/v2 on the client listener: the routes, the bearer token, lists, ETags and errors.

Every answer is `application/scim+json`. Users and Groups need the
organization's SCIM token (llmgw.scim.tokens); the discovery documents
(ServiceProviderConfig, Schemas, ResourceTypes) are open, as RFC 7644 allows.
Lists take `filter`, `startIndex` and `count`; every resource carries an
ETag (meta.version), and `If-Match` on a change refuses with 412 when the
resource moved on; `attributes` and `excludedAttributes` trim answers.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from aiohttp import web

from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import ServerConfig
from llmgw.obs import logs
from llmgw.auth import key_changes
from llmgw.scim import tokens
from llmgw.scim.directory import Directory, ScimError
from llmgw.scim.filters import FilterError, parse_filter
from llmgw.scim.patch import PatchError, apply_patch
from llmgw.scim.schemas import (
    ERROR,
    LIST,
    MAX_RESULTS,
    PATCH,
    SCHEMAS,
    resource_types,
    service_provider_config,
    with_location,
)
from llmgw.store import Invalid, NotFound, StoreError

log = logs.get("llmgw.scim")

PREFIX = "/scim/v2"
CONTENT_TYPE = "application/scim+json"
#: The largest request body read.
MAX_BODY = 1024 * 1024
#: Attributes every answer keeps, whatever `attributes` asks for.
ALWAYS = {"id", "schemas", "meta"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CONFIG = web.AppKey("scim_config", ServerConfig)
STORE_KEY = web.AppKey("scim_store_key", web.AppKey)


def install_scim(app: web.Application, config: ServerConfig, *, store_key: web.AppKey) -> None:
    """Add /scim/v2 to the client app; the store is read from ``app[store_key]`` once it runs."""
    app[CONFIG] = config
    app[STORE_KEY] = store_key
    # Suspensions made elsewhere (another control plane, llmgw users) reach this gateway's key cache.
    app.cleanup_ctx.append(key_changes.watch(store_key, _invalidate_of))
    p = PREFIX
    app.router.add_routes([
        web.get(p + "/ServiceProviderConfig", _answer(_spc)),
        web.get(p + "/Schemas", _answer(_schemas)),
        web.get(p + "/Schemas/{id}", _answer(_schema)),
        web.get(p + "/ResourceTypes", _answer(_resource_types)),
        web.get(p + "/ResourceTypes/{id}", _answer(_resource_type)),
        *(route for name, kind in (("Users", USERS), ("Groups", GROUPS)) for route in _routes(p + "/" + name, kind)),
        web.post(p + "/.search", _answer(_search_all, auth=True)),
        *[web.route(method, p + path, _answer(_read_only))
          for path in ("/ServiceProviderConfig", "/Schemas", "/ResourceTypes")
          for method in ("POST", "PUT", "PATCH", "DELETE")],
        web.route("*", p + "/{tail:.*}", _answer(_no_such_endpoint)),
    ])


# ---- answers -------------------------------------------------------------------------


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=json.dumps(body, ensure_ascii=False), status=status, headers=headers or {},
                        content_type=CONTENT_TYPE, charset="utf-8")


def _error(status: int, detail: str, scim_type: str | None = None) -> web.Response:
    body: dict[str, Any] = {"schemas": [ERROR], "status": str(status), "detail": detail}
    if scim_type:
        body["scimType"] = scim_type
    headers = {"WWW-Authenticate": 'Bearer realm="llmgw scim"'} if status == 401 else None
    return _json(body, status, headers)


def _base(request: web.Request) -> str:
    from llmgw.web.net import parse_networks, public_base

    config = request.app[CONFIG]
    return public_base(request, parse_networks(config.router.trusted_proxies)) + PREFIX


def _answer(handler: Callable[..., Awaitable[web.StreamResponse]], *, auth: bool = False) -> Handler:
    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        try:
            if not auth:
                return await handler(request)
            directory = await _directory(request)
            return await handler(request, directory)
        except ScimError as exc:
            return _error(exc.status, exc.detail, exc.scim_type)
        except PatchError as exc:
            return _error(400, str(exc), exc.scim_type)
        except FilterError as exc:
            return _error(400, f"filter: {exc}", "invalidFilter")
        except NotFound as exc:
            return _error(404, str(exc))
        except Invalid as exc:
            return _error(400, str(exc), "invalidValue")
        except StoreError as exc:
            log.warning("a SCIM request failed on the store: %s", exc)
            return _error(503, "the store cannot be reached; try again")

    return wrapper


def _invalidate_of(app: web.Application) -> Callable[[], None] | None:
    """This gateway's key cache's invalidate, when it has one."""
    from llmgw.router.gateway import GATEWAY

    resolver = getattr(app.get(GATEWAY), "resolver", None)
    return getattr(resolver, "invalidate", None)


async def _directory(request: web.Request) -> Directory:
    store = request.app.get(request.app[STORE_KEY])
    if store is None:
        raise ScimError(404, "this gateway has no store, so it keeps no people")
    header = request.headers.get("Authorization", "")
    if not header.lower().startswith("bearer "):
        raise ScimError(401, "send Authorization: Bearer TOKEN, with the token made by llmgw org scim-token ORG")
    org_id = await tokens.org_of(store, header[7:].strip())
    org = await store.get_org(org_id) if org_id else None
    if org is None:
        logs.event(log, "SCIM request refused: unknown token", logging.INFO, path=request.path[:200])
        raise ScimError(401, "the SCIM token is not one this gateway knows; make one with llmgw org scim-token ORG")
    from llmgw.admin.audit import AuditedStore

    tenancy = Tenancy(AuditedStore(store, via="scim", fields=None), actor=f"scim:{org.name}",  # type: ignore[arg-type]
                      on_change=_invalidate_of(request.app))
    return Directory(store, org, tenancy, _base(request))


async def _body(request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise ScimError(413, f"the body is larger than {MAX_BODY} bytes", "tooMany")
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ScimError(413, f"the body is larger than {MAX_BODY} bytes", "tooMany")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ScimError(400, "the body is not JSON", "invalidSyntax") from None


def _trim(resource: dict[str, Any], request: web.Request, params: dict[str, Any] | None = None) -> dict[str, Any]:
    params = params if params is not None else dict(request.query)
    wanted = params.get("attributes")
    excluded = params.get("excludedAttributes")

    def names(value: Any) -> list[str]:
        items = value if isinstance(value, list) else str(value).split(",")
        return [str(n).strip().rsplit(":", 1)[-1].lower() for n in items if str(n).strip()]

    if wanted:
        keep = names(wanted)
        tops = {n.split(".", 1)[0] for n in keep} | ALWAYS
        out = {}
        for key, value in resource.items():
            if key.lower() not in tops:
                continue
            subs = [n.split(".", 1)[1] for n in keep if n.startswith(key.lower() + ".")]
            if subs and key.lower() not in keep and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k.lower() in subs}
            elif subs and key.lower() not in keep and isinstance(value, list):
                value = [{k: v for k, v in item.items() if k.lower() in subs} if isinstance(item, dict) else item
                         for item in value]
            out[key] = value
        return out
    if excluded:
        drop = {n for n in names(excluded) if "." not in n} - ALWAYS
        return {k: v for k, v in resource.items() if k.lower() not in drop}
    return resource


def _one(resource: dict[str, Any], request: web.Request, status: int = 200) -> web.Response:
    headers = {"ETag": resource["meta"]["version"]}
    if status == 201:
        headers["Location"] = resource["meta"]["location"]
    return _json(_trim(resource, request), status, headers)


def _check_if_match(request: web.Request, resource: dict[str, Any]) -> None:
    want = request.headers.get("If-Match")
    if want and want.strip() != "*" and resource["meta"]["version"] not in [w.strip() for w in want.split(",")]:
        raise ScimError(412, "the resource changed since that version was read (If-Match); read it again")


async def _listing(request: web.Request, resources: list[dict[str, Any]], params: dict[str, Any]) -> web.Response:
    text = params.get("filter")
    if text:
        matches = parse_filter(str(text))
        resources = [r for r in resources if matches(r)]
    try:
        start = max(1, int(params.get("startIndex", 1)))
        count = max(0, min(MAX_RESULTS, int(params.get("count", MAX_RESULTS))))
    except (TypeError, ValueError):
        raise ScimError(400, "startIndex and count: expected whole numbers", "invalidValue") from None
    page = resources[start - 1:start - 1 + count]
    return _json({"schemas": [LIST], "totalResults": len(resources), "startIndex": start,
                  "itemsPerPage": len(page), "Resources": [_trim(r, request, params) for r in page]})


# ---- discovery -------------------------------------------------------------------------


async def _spc(request: web.Request) -> web.Response:
    return _json(service_provider_config(_base(request)))


async def _schemas(request: web.Request) -> web.Response:
    base = _base(request)
    found = [with_location(s, base) for s in SCHEMAS.values()]
    return _json({"schemas": [LIST], "totalResults": len(found), "startIndex": 1, "itemsPerPage": len(found),
                  "Resources": found})


async def _schema(request: web.Request) -> web.Response:
    schema = SCHEMAS.get(request.match_info["id"])
    if schema is None:
        raise ScimError(404, f"no schema {request.match_info['id']!r} here")
    return _json(with_location(schema, _base(request)))


async def _resource_types(request: web.Request) -> web.Response:
    found = resource_types(_base(request))
    return _json({"schemas": [LIST], "totalResults": len(found), "startIndex": 1, "itemsPerPage": len(found),
                  "Resources": found})


async def _resource_type(request: web.Request) -> web.Response:
    for rt in resource_types(_base(request)):
        if rt["id"] == request.match_info["id"]:
            return _json(rt)
    raise ScimError(404, f"no resource type {request.match_info['id']!r} here")


async def _read_only(request: web.Request) -> web.Response:
    raise ScimError(405, f"{request.path} is read only: GET it")


async def _no_such_endpoint(request: web.Request) -> web.Response:
    raise ScimError(404, f"{request.path} is not a SCIM endpoint here (Users, Groups, ServiceProviderConfig, "
                         "Schemas, ResourceTypes)")


# ---- Users -------------------------------------------------------------------------------


async def _all_users(d: Directory) -> list[dict[str, Any]]:
    external = await d.external_ids("user")
    return [await d.render_user(u, external) for u in await d.users()]


async def _all_groups(d: Directory) -> list[dict[str, Any]]:
    external = await d.external_ids("team")
    return [await d.render_group(t, external) for t in await d.teams()]


async def _search_body(request: web.Request) -> dict[str, Any]:
    body = await _body(request)
    if not isinstance(body, dict):
        raise ScimError(400, "a search body is a SearchRequest object", "invalidSyntax")
    return body


async def _search_all(request: web.Request, d: Directory) -> web.Response:
    body = await _search_body(request)
    return await _listing(request, await _all_users(d) + await _all_groups(d), body)


@attrs.frozen
class _Kind:
    """How SCIM's Users and Groups are read and changed in the directory: one set of handlers serves both."""

    every: Callable[[Directory], Awaitable[list[dict[str, Any]]]]
    find: Callable[[Directory, str], Awaitable[Any]]
    render: Callable[[Directory, Any], Awaitable[dict[str, Any]]]
    create: Callable[[Directory, Any], Awaitable[Any]]
    replace: Callable[[Directory, Any, Any], Awaitable[Any]]
    delete: Callable[[Directory, Any], Awaitable[None]]
    multi: str  #: the attribute PATCH may change one value of (a user's groups, a group's members)


USERS = _Kind(every=_all_users, find=Directory.user, render=Directory.render_user, create=Directory.create_user,
              replace=Directory.replace_user, delete=Directory.delete_user, multi="groups")
GROUPS = _Kind(every=_all_groups, find=Directory.team, render=Directory.render_group, create=Directory.create_group,
               replace=Directory.replace_group, delete=Directory.delete_group, multi="members")


def _handlers(kind: _Kind) -> dict[str, Callable[[web.Request, Directory], Awaitable[web.StreamResponse]]]:
    """list, search, get, create, put, patch and delete of one kind of resource."""

    async def listed(request: web.Request, d: Directory) -> web.Response:
        return await _listing(request, await kind.every(d), dict(request.query))

    async def searched(request: web.Request, d: Directory) -> web.Response:
        return await _listing(request, await kind.every(d), await _search_body(request))

    async def got(request: web.Request, d: Directory) -> web.StreamResponse:
        resource = await kind.render(d, await kind.find(d, request.match_info["id"]))
        if request.headers.get("If-None-Match", "").strip() == resource["meta"]["version"]:
            return web.Response(status=304, headers={"ETag": resource["meta"]["version"]})
        return _one(resource, request)

    async def created(request: web.Request, d: Directory) -> web.Response:
        return _one(await kind.render(d, await kind.create(d, await _body(request))), request, 201)

    async def put(request: web.Request, d: Directory) -> web.Response:
        found = await kind.find(d, request.match_info["id"])
        _check_if_match(request, await kind.render(d, found))
        return _one(await kind.render(d, await kind.replace(d, found, await _body(request))), request)

    async def patched(request: web.Request, d: Directory) -> web.Response:
        found = await kind.find(d, request.match_info["id"])
        current = await kind.render(d, found)
        _check_if_match(request, current)
        body = await _body(request)
        _patch_schema(body)
        changed = apply_patch(current, body.get("Operations"), {kind.multi})
        return _one(await kind.render(d, await kind.replace(d, found, changed)), request)

    async def deleted(request: web.Request, d: Directory) -> web.Response:
        found = await kind.find(d, request.match_info["id"])
        _check_if_match(request, await kind.render(d, found))
        await kind.delete(d, found)
        return web.Response(status=204)

    return {"list": listed, "search": searched, "get": got, "create": created, "put": put, "patch": patched,
            "delete": deleted}


def _routes(path: str, kind: _Kind) -> list[web.RouteDef]:
    h = _handlers(kind)
    return [web.get(path, _answer(h["list"], auth=True)), web.post(path, _answer(h["create"], auth=True)),
            web.post(path + "/.search", _answer(h["search"], auth=True)),
            web.get(path + "/{id}", _answer(h["get"], auth=True)), web.put(path + "/{id}", _answer(h["put"], auth=True)),
            web.patch(path + "/{id}", _answer(h["patch"], auth=True)),
            web.delete(path + "/{id}", _answer(h["delete"], auth=True))]


def _patch_schema(body: Any) -> None:
    if not isinstance(body, dict) or PATCH not in (body.get("schemas") or []):
        raise ScimError(400, f"a PATCH body is a PatchOp: schemas [{PATCH!r}] and Operations", "invalidSyntax")
