"""Single sign-on through an OpenID Connect provider: the relying party's side.

`Provider` reads the provider's discovery document, keeps its signing keys
(JWKS, fetched again when a token names a key id not seen yet, so a key
rotation at the provider needs nothing here), builds the authorization
request of the code flow with PKCE (S256), a `state` and a `nonce`, trades
the code for tokens and checks the ID token: signature, issuer, audience,
expiry and issue time (with `auth.oidc.clock_skew` allowed), and the nonce.
The JOSE work is joserfc's; this module only decides what must hold.

It also reads an access token back into claims through the provider's
userinfo endpoint, which is how the admin API knows the person behind a
token that `llmgw ctl` got through the device flow (RFC 8628).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote_plus, urlencode

import aiohttp
from joserfc import errors as jose_errors
from joserfc import jwt
from joserfc.jwk import KeySet

from llmgw.config.server import OIDCConfig

__all__ = ["OIDCError", "Pending", "Provider", "pkce_challenge"]

#: How long a discovery document is trusted before it is read again.
DISCOVERY_TTL = 3600.0
#: The fewest seconds between two JWKS fetches caused by unknown key ids
#: (a flood of made-up key ids must not become a flood of fetches).
JWKS_MIN_INTERVAL = 10.0
#: How long an access token's userinfo answer is reused.
USERINFO_TTL = 60.0
#: The longest an answer from the provider may take.
HTTP_TIMEOUT = 10.0


class OIDCError(Exception):
    """Sign-in through the provider failed; the message says why, without any token in it."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE verifier (RFC 7636)."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


class Pending(dict):
    """What the browser keeps between the redirect and the callback: state, nonce, PKCE verifier, next page."""

    @classmethod
    def new(cls, next_path: str) -> "Pending":
        return cls(state=secrets.token_urlsafe(24), nonce=secrets.token_urlsafe(24),
                   verifier=secrets.token_urlsafe(48), next=next_path)


class Provider:
    """One configured provider. ``clock`` gives seconds since the epoch (tests move it)."""

    def __init__(self, config: OIDCConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.jwks_min_interval = JWKS_MIN_INTERVAL
        self._discovery: dict[str, Any] | None = None
        self._discovery_at = 0.0
        self._keys: KeySet | None = None
        self._keys_at = -1e18
        self._userinfo: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = asyncio.Lock()

    @property
    def issuer(self) -> str:
        return self.config.issuer.rstrip("/")

    # ---- the provider's documents ------------------------------------------------

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT)) as http:
                async with http.get(url, headers={"Accept": "application/json"}) as response:
                    if response.status != 200:
                        raise OIDCError(f"the provider's {what} at {url} answered HTTP {response.status}")
                    body = await response.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise OIDCError(f"the provider's {what} at {url} cannot be read: {exc or type(exc).__name__}") from None
        if not isinstance(body, dict):
            raise OIDCError(f"the provider's {what} at {url} is not a JSON object")
        return body

    async def discovery(self) -> dict[str, Any]:
        """The provider's `.well-known/openid-configuration`, checked to be the configured issuer's."""
        if self._discovery is not None and self.clock() - self._discovery_at < DISCOVERY_TTL:
            return self._discovery
        url = self.issuer + "/.well-known/openid-configuration"
        doc = await self._get_json(url, "discovery document")
        if str(doc.get("issuer", "")).rstrip("/") != self.issuer:
            raise OIDCError(f"the discovery document at {url} names issuer {doc.get('issuer')!r}, "
                            f"not {self.config.issuer!r}: set auth.oidc.issuer to the provider's own")
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(doc.get(key), str):
                raise OIDCError(f"the discovery document at {url} has no {key}")
        self._discovery, self._discovery_at = doc, self.clock()
        return doc

    async def _key_set(self, *, refresh: bool = False) -> KeySet:
        async with self._lock:
            if self._keys is None or (refresh and self.clock() - self._keys_at >= self.jwks_min_interval):
                url = (await self.discovery())["jwks_uri"]
                try:
                    keys = KeySet.import_key_set(await self._get_json(url, "key set (JWKS)"))  # type: ignore[arg-type]
                except (jose_errors.JoseError, ValueError, TypeError, KeyError) as exc:
                    raise OIDCError(f"the provider's key set at {url} cannot be read: {exc}") from None
                self._keys, self._keys_at = keys, self.clock()
            return self._keys

    # ---- the code flow ---------------------------------------------------------------

    async def authorization_url(self, pending: Pending) -> str:
        doc = await self.discovery()
        query = {
            "response_type": "code",
            "client_id": self.config.client_id,
            "redirect_uri": self.config.redirect_url,
            "scope": " ".join(self.config.scopes),
            "state": pending["state"],
            "nonce": pending["nonce"],
            "code_challenge": pkce_challenge(pending["verifier"]),
            "code_challenge_method": "S256",
        }
        sep = "&" if "?" in doc["authorization_endpoint"] else "?"
        return doc["authorization_endpoint"] + sep + urlencode(query)

    async def _token_request(self, form: dict[str, str], *, client_id: str | None = None,
                             secret: bool = True) -> tuple[int, dict[str, Any]]:
        doc = await self.discovery()
        form = {**form, "client_id": client_id or self.config.client_id}
        headers = {"Accept": "application/json"}
        if secret and self.config.client_secret is not None:
            # client_secret_basic: both parts form-encoded first (RFC 6749 section 2.3.1).
            headers["Authorization"] = aiohttp.encode_basic_auth(
                quote_plus(form["client_id"]), quote_plus(self.config.client_secret.reveal()))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT)) as http:
                async with http.post(doc["token_endpoint"], data=form, headers=headers) as response:
                    body = await response.json(content_type=None)
                    return response.status, body if isinstance(body, dict) else {}
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise OIDCError(f"the provider's token endpoint cannot be reached: {exc or type(exc).__name__}") from None

    async def finish(self, code: str, pending: Mapping[str, str]) -> dict[str, Any]:
        """Trade the callback's code for tokens; the ID token's checked claims."""
        status, body = await self._token_request({
            "grant_type": "authorization_code", "code": code, "redirect_uri": self.config.redirect_url,
            "code_verifier": pending["verifier"],
        })
        if status != 200 or "id_token" not in body:
            raise OIDCError(f"the provider refused the code (HTTP {status}: {body.get('error', 'no id_token')})")
        return await self.verify_id_token(str(body["id_token"]), nonce=pending["nonce"])

    async def verify_id_token(self, token: str, *, nonce: str | None, audience: str | None = None) -> dict[str, Any]:
        """The claims of an ID token once its signature, issuer, audience, times and nonce hold."""
        doc = await self.discovery()
        # Only signatures by the provider's published keys: never "none", never a shared secret (HS*).
        algorithms = [a for a in doc.get("id_token_signing_alg_values_supported", ["RS256"])
                      if isinstance(a, str) and a.startswith(("RS", "PS", "ES", "EdDSA"))] or ["RS256"]
        keys = await self._key_set()
        try:
            decoded = self._decode(token, keys, algorithms)
        except (jose_errors.MissingKeyError, jose_errors.InvalidKeyIdError):
            # A key id not in our copy: the provider may have rotated its keys.
            decoded = self._decode(token, await self._key_set(refresh=True), algorithms, refreshed=True)
        claims = decoded.claims
        audience = audience or self.config.client_id
        skew = int(self.config.clock_skew.total_seconds())
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self.clock()), leeway=skew,
            iss={"essential": True, "value": self.issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True}, iat={"essential": True}, sub={"essential": True},
        )
        if str(claims.get("iss", "")).rstrip("/") == self.issuer:
            claims = {**claims, "iss": self.issuer}  # a trailing slash on either side is the same issuer
        try:
            registry.validate(claims)
        except jose_errors.ExpiredTokenError:
            raise OIDCError("the ID token has expired") from None
        except jose_errors.InvalidClaimError as exc:
            raise OIDCError(f"the ID token's {exc.claim} claim is not this provider's or this client's"
                            if exc.claim in ("iss", "aud") else f"the ID token's {exc.claim} claim is wrong") from None
        except jose_errors.MissingClaimError as exc:
            raise OIDCError(f"the ID token has no {exc.claim} claim") from None
        except jose_errors.JoseError as exc:
            raise OIDCError(f"the ID token is not valid: {exc.error}") from None
        if isinstance(claims.get("aud"), list) and len(claims["aud"]) > 1 and claims.get("azp") not in (None, audience):
            raise OIDCError("the ID token was issued to another client (azp)")
        if nonce is not None and not secrets.compare_digest(str(claims.get("nonce", "")), nonce):
            raise OIDCError("the ID token's nonce is not the one this sign-in sent")
        return dict(claims)

    @staticmethod
    def _decode(token: str, keys: KeySet, algorithms: list[str], *, refreshed: bool = False):
        try:
            return jwt.decode(token, keys, algorithms=algorithms)
        except (jose_errors.MissingKeyError, jose_errors.InvalidKeyIdError):
            if refreshed:
                raise OIDCError("the ID token names a signing key the provider does not publish") from None
            raise
        except jose_errors.BadSignatureError:
            raise OIDCError("the ID token's signature is not the provider's") from None
        except (jose_errors.JoseError, ValueError, TypeError) as exc:
            raise OIDCError(f"the ID token cannot be read: {getattr(exc, 'error', exc)}") from None

    # ---- access tokens (the admin API) ----------------------------------------------

    async def userinfo(self, access_token: str) -> dict[str, Any]:
        """The claims the provider gives for an access token; OIDCError when it refuses the token."""
        key = hashlib.sha256(access_token.encode("utf-8")).hexdigest()
        now = self.clock()
        cached = self._userinfo.get(key)
        if cached is not None and now - cached[0] < USERINFO_TTL:
            return cached[1]
        doc = await self.discovery()
        url = doc.get("userinfo_endpoint")
        if not isinstance(url, str):
            raise OIDCError("the provider has no userinfo endpoint, so its access tokens cannot be checked")
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT)) as http:
                async with http.get(url, headers={"Authorization": f"Bearer {access_token}",
                                                  "Accept": "application/json"}) as response:
                    if response.status != 200:
                        raise OIDCError(f"the provider refused the access token (HTTP {response.status})")
                    claims = await response.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise OIDCError(f"the provider's userinfo endpoint cannot be reached: {exc or type(exc).__name__}") from None
        if not isinstance(claims, dict):
            raise OIDCError("the provider's userinfo answer is not a JSON object")
        if len(self._userinfo) > 1000:
            self._userinfo = {k: v for k, v in self._userinfo.items() if now - v[0] < USERINFO_TTL}
        self._userinfo[key] = (now, claims)
        return claims
