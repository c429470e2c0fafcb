"""Signing `llmgw ctl` and the console in through the provider's device flow (RFC 8628).

`sign_in` asks the provider's device authorization endpoint for a code, has
`show` tell the operator where to enter it, polls the token endpoint at the
interval the provider asks (slower when told `slow_down`) until the
operator approves, refuses, or the code expires, and returns the access
token with its expiry. `save` and `saved_token` keep it in the operator's
own file (`~/.config/llmgw/oidc-tokens.json`, mode 0600), one per admin API
address, so the next commands use it until it expires.

Synchronous (urllib), as ctl is.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from llmgw.auth.oidc import OIDCError

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
TIMEOUT = 15.0


@attrs.frozen
class DeviceCode:
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: int


@attrs.frozen
class SignedIn:
    access_token: str = attrs.field(repr=False)
    expires_at: float


def _post(url: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
    data = urllib.parse.urlencode(form).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={
        "Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OIDCError(f"cannot reach the provider at {url}: {getattr(exc, 'reason', exc)}") from None


def discover(issuer: str) -> dict[str, Any]:
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                    timeout=TIMEOUT) as resp:
            doc = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OIDCError(f"cannot read the provider's discovery document at {url}: {getattr(exc, 'reason', exc)}"
                        ) from None
    if not isinstance(doc, dict) or not doc.get("device_authorization_endpoint"):
        raise OIDCError(f"the provider at {issuer} offers no device sign-in (no device_authorization_endpoint "
                        "in its discovery document); turn on the device flow for the client there")
    return doc


def sign_in(issuer: str, client_id: str, scopes: list[str], show: Callable[[DeviceCode], None], *,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time) -> SignedIn:
    """The access token once the operator approves at the provider; OIDCError saying why not."""
    doc = discover(issuer)
    status, body = _post(doc["device_authorization_endpoint"], {"client_id": client_id, "scope": " ".join(scopes)})
    if status != 200 or not body.get("device_code"):
        raise OIDCError(f"the provider refused the device sign-in (HTTP {status}: "
                        f"{body.get('error_description') or body.get('error') or 'no device_code'})")
    code = DeviceCode(str(body["user_code"]), str(body["verification_uri"]),
                      body.get("verification_uri_complete"), int(body.get("expires_in", 600)))
    show(code)
    interval = float(body.get("interval", 5))
    deadline = clock() + code.expires_in
    while clock() < deadline:
        sleep(interval)
        status, answer = _post(doc["token_endpoint"], {"grant_type": DEVICE_GRANT, "device_code": body["device_code"],
                                                       "client_id": client_id})
        if status == 200 and answer.get("access_token"):
            return SignedIn(str(answer["access_token"]), clock() + float(answer.get("expires_in", 3600)))
        error = answer.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5
            continue
        if error == "access_denied":
            raise OIDCError("the sign-in was refused at the provider")
        if error == "expired_token":
            break
        raise OIDCError(f"the provider's token endpoint answered HTTP {status}: {error or 'no access_token'}")
    raise OIDCError("the code expired before it was approved; run llmgw ctl signin again")


def tokens_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "llmgw" / "oidc-tokens.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(admin_url: str, signed: SignedIn, path: Path | None = None) -> Path:
    """Keep the token for ``admin_url`` (the file is the operator's alone: 0600)."""
    path = path or tokens_file()
    data = _read(path)
    data[admin_url.rstrip("/")] = {"access_token": signed.access_token, "expires_at": signed.expires_at}
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(tmp, path)
    return path


def saved_token(admin_url: str, path: Path | None = None, *, now: float | None = None) -> str | None:
    """The token saved for ``admin_url`` while it is still good (a minute to spare), else None."""
    entry = _read(path or tokens_file()).get(admin_url.rstrip("/"))
    if not isinstance(entry, dict) or not isinstance(entry.get("access_token"), str):
        return None
    if float(entry.get("expires_at", 0)) - 60 <= (now if now is not None else time.time()):
        return None
    return entry["access_token"]


def forget(admin_url: str, path: Path | None = None) -> bool:
    path = path or tokens_file()
    data = _read(path)
    if data.pop(admin_url.rstrip("/"), None) is None:
        return False
    save_all = path.with_suffix(".tmp")
    fd = os.open(save_all, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(save_all, path)
    return True
