"""The admin API's second way in: a person's access token from the OIDC provider.

`llmgw ctl signin` gets one through the device flow. A bearer that is not
the admin token is asked of the provider's userinfo endpoint (answers kept a
minute); it is accepted when the claims name an active person here whose
staff role is admin: the role the rules in auth.oidc.rules give (when any
rule gives roles), else the role the person has here. The audit log then
names that person, whatever X-Llmgw-Actor says.
"""

from __future__ import annotations

import weakref

from aiohttp import web

from llmgw.admin.errors import ApiError
from llmgw.auth.oidc import OIDCError, Provider
from llmgw.auth.oidc_accounts import identity_of

PERSON = web.RequestKey("admin_oidc_person", str)
#: one provider per admin app (its discovery, keys and userinfo answers cached)
_PROVIDERS: "weakref.WeakKeyDictionary[web.Application, Provider]" = weakref.WeakKeyDictionary()


def provider_of(app: web.Application, admin) -> Provider | None:
    config = admin.config.auth.oidc
    if not config.issuer:
        return None
    provider = _PROVIDERS.get(app)
    if provider is None or provider.config is not config:
        provider = _PROVIDERS[app] = Provider(config)
    return provider


async def accept(request: web.Request, admin, token: str) -> str:
    """The person's email when ``token`` is an admin's access token; ApiError 401/403 saying why not."""
    provider = provider_of(request.app, admin)
    if provider is None:
        raise ApiError(401, "the admin token is wrong: use the one in the server's admin_token_file")
    try:
        claims = await provider.userinfo(token)
        identity = identity_of(claims, admin.config.auth.oidc)
    except OIDCError as exc:
        raise ApiError(401, f"neither the admin token nor a token of {provider.issuer}: {exc}; "
                            "run llmgw ctl signin, or use the admin token") from None
    user = await admin.store.get_user_by_email(identity.email)
    if user is None or user.state != "active":
        raise ApiError(403, f"{identity.email} has no active account here")
    role = identity.role if identity.role is not None else user.role
    if role != "admin":
        raise ApiError(403, f"{identity.email} is signed in, but the admin API is for the admin staff role "
                            f"(theirs is {role!r})")
    return identity.email
