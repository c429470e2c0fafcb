"""An OpenID Connect provider the tests run: authlib's authorization server on aiohttp.

It serves discovery, a JWKS, the authorization code flow (PKCE required,
`nonce` put in the ID token), the token endpoint, userinfo, and the device
flow (RFC 8628). Its sign-in page is a form with one field, the person's
username (no password: this is a test provider); `op.people` says who
exists and with which claims. `op.rotate()` makes a new signing key (the
JWKS then holds only it); `op.id_token_changes` changes the claims of the
ID tokens it issues next (a wrong audience, an expiry in the past), and
`op.foreign_key` signs them with a key the JWKS does not hold.
"""

from __future__ import annotations

import os
import secrets
import time
from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

import attrs
from aiohttp import web
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")  # the test provider speaks plain http on 127.0.0.1

from authlib.common.security import generate_token  # noqa: E402
from authlib.oauth2 import AuthorizationServer, OAuth2Request  # noqa: E402
from authlib.oauth2.rfc6749 import OAuth2Payload, grants  # noqa: E402
from authlib.oauth2.rfc6750 import BearerTokenGenerator  # noqa: E402
from authlib.oauth2.rfc7636 import CodeChallenge  # noqa: E402
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant, DeviceCredentialDict  # noqa: E402
from authlib.oidc.core import OpenIDCode, UserInfo  # noqa: E402
from authlib.oidc.core.grants.code import OpenIDToken  # noqa: E402


_KEYS: dict[int, RSAKey] = {}


def signing_key(number: int) -> RSAKey:
    """The provider's key number ``number`` (kid key-N), made once per test run: making RSA keys is slow."""
    if number not in _KEYS:
        _KEYS[number] = RSAKey.generate_key(2048, parameters={"kid": f"key-{number}", "use": "sig", "alg": "RS256"})
    return _KEYS[number]


@attrs.define
class Client:
    client_id: str
    client_secret: str | None
    redirect_uris: list[str]
    grant_types: tuple[str, ...] = ("authorization_code", DeviceCodeGrant.GRANT_TYPE)

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope):
        return " ".join(s for s in (scope or "").split() if s in ("openid", "email", "profile", "groups"))

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret):
        return self.client_secret is not None and secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        if self.client_secret is None:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type in self.grant_types


@attrs.define
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return self.auth_time

    def get_acr(self):
        return None

    def get_amr(self):
        return None


class _Payload(OAuth2Payload):
    def __init__(self, values: dict[str, list[str]]):
        self._values = values

    @property
    def data(self):
        return {k: v[0] for k, v in self._values.items()}

    @property
    def datalist(self):
        return defaultdict(list, self._values)


class _Request(OAuth2Request):
    def __init__(self, method: str, url: str, headers, values: dict[str, list[str]]):
        super().__init__(method=method, uri=url, headers=headers)
        self.payload = _Payload(values)
        self._values = values

    @property
    def args(self):
        return {k: v[0] for k, v in self._values.items()}

    @property
    def form(self):
        return {k: v[0] for k, v in self._values.items()}


class TestProvider:
    """The provider; `await op.start()` gives it an address (op.issuer)."""

    __test__ = False

    def __init__(self) -> None:
        self.issuer = ""
        self.people: dict[str, dict[str, Any]] = {}
        self.clients: dict[str, Client] = {}
        self.codes: dict[str, Code] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.devices: dict[str, dict[str, Any]] = {}
        self.device_grants: dict[str, tuple[str, bool]] = {}
        self.id_token_changes: dict[str, Any] = {}
        #: seconds the device flow asks a client to wait between polls (RFC 8628 says whole seconds;
        #: a tenth keeps the tests quick)
        self.device_interval = 0.1
        self.foreign_key: RSAKey | None = None
        self.key = signing_key(1)
        self.key_number = 1
        self.runner: web.AppRunner | None = None
        self.server = self._server()

    # ---- what tests change ---------------------------------------------------------

    def add_client(self, client_id: str, secret: str | None, redirect_uris: list[str]) -> None:
        self.clients[client_id] = Client(client_id, secret, redirect_uris)

    def rotate(self) -> None:
        self.key_number += 1
        self.key = signing_key(self.key_number)

    # ---- authlib's server, wired to this object's dicts --------------------------------

    def _server(self) -> AuthorizationServer:
        op = self

        class Server(AuthorizationServer):
            def query_client(self, client_id):
                return op.clients.get(client_id)

            def save_token(self, token, request):
                op.tokens[token["access_token"]] = {"user": request.user, "scope": token.get("scope", ""),
                                                    "expires_at": time.time() + token.get("expires_in", 3600)}

            def create_oauth2_request(self, request):
                return request

            def create_json_request(self, request):
                return request

            def handle_response(self, status, body, headers):
                headers = {k: v for k, v in dict(headers or []).items() if k.lower() != "content-type"}
                if isinstance(body, dict):
                    return web.json_response(body, status=status, headers=headers)
                return web.Response(status=status, text=body or "", headers=headers)

            def send_signal(self, name, *args, **kwargs):
                pass

        def user_info(user: str, scope: str) -> UserInfo:
            person = op.people[user]
            info = UserInfo(sub=user, name=person.get("name", user))
            info.update({k: v for k, v in person.items() if k != "name"})
            return info

        class IDToken(OpenIDCode):
            def resolve_client_private_key(self, client):
                return op.foreign_key or op.key

            def get_encode_header(self, client):
                key = op.foreign_key or op.key
                return {"alg": "RS256", "kid": key.kid}

            def get_client_claims(self, client):
                now = int(time.time())
                return {"iss": op.issuer, "aud": [client.get_client_id()], "iat": now, "exp": now + 300}

            def exists_nonce(self, nonce, request):
                return any(c.nonce == nonce for c in op.codes.values())

            def generate_user_info(self, user, scope):
                return user_info(user, scope)

            def encode_id_token(self, token, request):
                if not op.id_token_changes:
                    return super().encode_id_token(token, request)
                claims = self.get_compatible_claims(request)
                claims.update(self.get_authorization_code_claims(request.authorization_code))
                claims.update(user_info(request.user, token["scope"]))
                claims.update(op.id_token_changes)
                return jwt.encode(self.get_encode_header(request.client), claims, op.foreign_key or op.key)

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]

            def save_authorization_code(self, code, request):
                data = request.payload.data
                op.codes[code] = Code(code, request.client.client_id, data.get("redirect_uri", ""),
                                      request.payload.scope, request.user, data.get("nonce"),
                                      data.get("code_challenge"), data.get("code_challenge_method"), int(time.time()))

            def query_authorization_code(self, code, client):
                found = op.codes.get(code)
                return found if found is not None and found.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code):
                op.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code):
                return authorization_code.user

        class DeviceIDToken(OpenIDToken):
            def resolve_client_private_key(self, client):
                return op.key

            def get_encode_header(self, client):
                return {"alg": "RS256", "kid": op.key.kid}

            def get_client_claims(self, client):
                now = int(time.time())
                return {"iss": op.issuer, "aud": [client.get_client_id()], "iat": now, "exp": now + 300}

            def get_authorization_code_claims(self, authorization_code):
                return {}

            def generate_user_info(self, user, scope):
                return user_info(user, scope)

        class DeviceGrant(DeviceCodeGrant):
            def query_device_credential(self, device_code):
                data = op.devices.get(device_code)
                return DeviceCredentialDict(data) if data else None

            def query_user_grant(self, user_code):
                return op.device_grants.get(user_code)

            def should_slow_down(self, credential):
                return False

        class DeviceEndpoint(DeviceAuthorizationEndpoint):
            INTERVAL = op.device_interval
            def get_verification_uri(self):
                return op.issuer + "/device"

            def save_device_credential(self, client_id, scope, data):
                op.devices[data["device_code"]] = {"client_id": client_id, "scope": scope,
                                                   "expires_at": int(time.time()) + data["expires_in"], **data}

        server = Server(scopes_supported=["openid", "email", "profile", "groups"])
        server.register_token_generator("default", BearerTokenGenerator(lambda *a, **k: generate_token(40)))
        server.register_grant(CodeGrant, [CodeChallenge(required=True), IDToken(require_nonce=True)])
        server.register_grant(DeviceGrant, [DeviceIDToken()])
        server.register_endpoint(DeviceEndpoint)
        return server

    # ---- HTTP ------------------------------------------------------------------------------

    async def _request(self, request: web.Request) -> _Request:
        values: dict[str, list[str]] = defaultdict(list)
        for k, v in request.query.items():
            values[k].append(v)
        if request.method == "POST":
            for k, v in (await request.post()).items():
                values[k].append(str(v))
        return _Request(request.method, str(request.url), request.headers, dict(values))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/jwks", self.jwks)
        app.router.add_get("/authorize", self.authorize_form)
        app.router.add_post("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        app.router.add_get("/userinfo", self.userinfo)
        app.router.add_post("/device_authorization", self.device_authorization)
        app.router.add_get("/device", self.device_form)
        app.router.add_post("/device", self.device_approve)
        return app

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app())
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.issuer = f"http://127.0.0.1:{port}"
        return self.issuer

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def discovery(self, request: web.Request) -> web.Response:
        i = self.issuer
        return web.json_response({
            "issuer": i, "authorization_endpoint": i + "/authorize", "token_endpoint": i + "/token",
            "userinfo_endpoint": i + "/userinfo", "jwks_uri": i + "/jwks",
            "device_authorization_endpoint": i + "/device_authorization",
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"], "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", DeviceCodeGrant.GRANT_TYPE],
            "scopes_supported": ["openid", "email", "profile", "groups"],
        })

    async def jwks(self, request: web.Request) -> web.Response:
        return web.json_response(KeySet([self.key]).as_dict(private=False))

    async def authorize_form(self, request: web.Request) -> web.Response:
        try:
            self.server.get_consent_grant(await self._request(request))
        except Exception as exc:  # noqa: BLE001 - shown to the test, which reads it
            return web.Response(status=400, text=f"bad authorization request: {exc}")
        page = ("<!doctype html><title>Test provider</title><form method=post action='/authorize?"
                + urlencode(request.query).replace("'", "%27") + "'><input name=username id=username>"
                "<button type=submit id=approve>Sign in</button></form>")
        return web.Response(text=page, content_type="text/html")

    async def authorize(self, request: web.Request) -> web.StreamResponse:
        oauth = await self._request(request)
        username = oauth.form.get("username", "")
        if username not in self.people:
            return web.Response(status=401, text="no such person at the test provider")
        grant = self.server.get_consent_grant(oauth, end_user=username)
        return self.server.create_authorization_response(oauth, grant_user=username, grant=grant)

    async def token(self, request: web.Request) -> web.StreamResponse:
        return self.server.create_token_response(await self._request(request))

    async def device_authorization(self, request: web.Request) -> web.StreamResponse:
        return self.server.create_endpoint_response(DeviceAuthorizationEndpoint.ENDPOINT_NAME,
                                                    await self._request(request))

    async def device_form(self, request: web.Request) -> web.Response:
        return web.Response(text="<form method=post><input name=user_code><input name=username>"
                                 "<button type=submit>Approve</button></form>", content_type="text/html")

    async def device_approve(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.approve_device(str(form.get("user_code", "")), str(form.get("username", "")))
        return web.Response(text="approved; go back to your terminal")

    def approve_device(self, user_code: str, username: str) -> None:
        self.device_grants[user_code] = (username, username in self.people)

    async def userinfo(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        token = self.tokens.get(header.removeprefix("Bearer ").strip()) if header.startswith("Bearer ") else None
        if token is None or token["expires_at"] < time.time():
            return web.json_response({"error": "invalid_token"}, status=401)
        person = self.people[token["user"]]
        return web.json_response({"sub": token["user"], **person})
