"""Join codes: a single-use ticket that lets one machine become a node with `llmgw join CODE`.

A code holds what the node needs to trust the control plane before it has
any certificate (the agent addresses and the SHA-256 fingerprint of the
cluster's CA) and a secret that proves the holder was given the code. The
store keeps only the secret's SHA-256, with the code's expiry and the node
name it is for. Using a code removes it in one step (a second use, even at
the same moment on another control plane, finds nothing); a short record of
the use is kept until the code would have expired, so a second try is told
who used it.

    llmgw1-<base64url of {"v":1,"i":id,"s":secret,"f":ca sha256,"a":[addresses],"n":name,"e":expiry}>
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from typing import Any

import attrs

from llmgw.store import Store
from llmgw.compat import fromisoformat

__all__ = [
    "CODE_PREFIX", "CODES_PREFIX", "USED_PREFIX", "DEFAULT_TTL", "MAX_TTL",
    "JoinCode", "JoinCodeError", "JoinCodes", "parse_code",
]

CODE_PREFIX = "llmgw1-"
CODES_PREFIX = "join.codes."
USED_PREFIX = "join.used."
DEFAULT_TTL = dt.timedelta(hours=1)
MAX_TTL = dt.timedelta(days=7)
ACTOR = "join"


class JoinCodeError(Exception):
    """A code that cannot be made or used; the message says why, for the operator or the node."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class JoinCode:
    """What a code says, once read (on the node) or made (on the control plane)."""

    id: str
    secret: str = attrs.field(repr=False)
    ca_sha256: str  #: lower-case hex, no colons
    addresses: tuple[str, ...]
    name: str = ""  #: the node's name when the code is for one; empty lets the node choose
    expires_at: dt.datetime = attrs.field(factory=lambda: dt.datetime.now(dt.timezone.utc))

    def text(self) -> str:
        body = {"v": 1, "i": self.id, "s": self.secret, "f": self.ca_sha256, "a": list(self.addresses),
                "n": self.name, "e": int(self.expires_at.timestamp())}
        raw = json.dumps(body, separators=(",", ":")).encode()
        return CODE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_code(text: str) -> JoinCode:
    """Read a code as `ctl node join-code` printed it; JoinCodeError says what is wrong with it."""
    text = "".join(text.split())
    if not text.startswith(CODE_PREFIX):
        raise JoinCodeError(f"this is not a join code: it should start with {CODE_PREFIX!r}, as "
                            "`llmgw ctl node join-code` prints it", 400)
    payload = text[len(CODE_PREFIX):]
    try:
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        code = JoinCode(
            id=_text(body["i"]), secret=_text(body["s"]), ca_sha256=_text(body["f"]).lower(),
            addresses=tuple(_text(a) for a in body["a"]), name=_text(body.get("n", "")),
            expires_at=dt.datetime.fromtimestamp(int(body["e"]), dt.timezone.utc),
        )
    except (ValueError, KeyError, TypeError):
        raise JoinCodeError("this join code is damaged (cut short or mistyped?): copy it again whole", 400) from None
    if body.get("v") != 1:
        raise JoinCodeError(f"this join code is of version {body.get('v')!r}, which this llmgw does not read; "
                            "use the llmgw of the control plane that made it", 400)
    if len(code.ca_sha256) != 64 or not code.addresses:
        raise JoinCodeError("this join code is damaged: it names no control plane or no CA", 400)
    return code


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError
    return value


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class JoinCodes:
    """Making, listing and using codes, kept in the store's settings under join.codes.<id>."""

    def __init__(self, store: Store, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.store = store
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))

    async def create(self, *, addresses: list[str], ca_sha256: str, ttl: dt.timedelta = DEFAULT_TTL,
                     name: str = "", actor: str) -> JoinCode:
        if not dt.timedelta(minutes=1) <= ttl <= MAX_TTL:
            raise JoinCodeError(f"ttl: between 1m and 7d, got {_say(ttl)}", 400)
        if not addresses:
            raise JoinCodeError("no control plane has recorded its agent address yet, so a node would not know "
                                "where to dial; start the control plane with the agent port on", 409)
        if name:
            from llmgw.pki.certs import InvalidName, validate_node_id

            try:
                validate_node_id(name, what="name")
            except InvalidName as exc:
                raise JoinCodeError(str(exc), 400) from None
        await self._purge()
        now = self.clock().replace(microsecond=0)
        code = JoinCode(id=secrets.token_hex(6), secret=secrets.token_urlsafe(32),
                        ca_sha256=ca_sha256.replace(":", "").lower(), addresses=tuple(addresses), name=name,
                        expires_at=now + ttl)
        await self.store.set_setting(CODES_PREFIX + code.id, {
            "secret_sha256": _hash(code.secret), "expires_at": code.expires_at.isoformat(), "name": name,
            "created_by": actor, "created_at": now.isoformat(), "addresses": list(addresses),
        }, actor=actor)
        return code

    async def live(self) -> list[dict[str, Any]]:
        """Codes not yet used nor expired, soonest to expire first; never their secrets."""
        await self._purge()
        out = []
        for key, setting in (await self.store.get_settings()).items():
            if key.startswith(CODES_PREFIX) and isinstance(setting.value, dict):
                v = setting.value
                out.append({"id": key[len(CODES_PREFIX):], "name": v.get("name", ""),
                            "expires_at": v.get("expires_at", ""), "created_by": v.get("created_by", ""),
                            "created_at": v.get("created_at", "")})
        return sorted(out, key=lambda c: c["expires_at"])

    async def revoke(self, code_id: str, *, actor: str) -> bool:
        return await self.store.unset_setting(CODES_PREFIX + code_id, actor=actor)

    async def use(self, code_id: str, secret: str, *, node: str, peer: str) -> dict[str, Any]:
        """Take the code for `node` (once); JoinCodeError says why not. Returns what the store kept of it."""
        key = CODES_PREFIX + code_id
        setting = await self.store.get_setting(key)
        if setting is None or not isinstance(setting.value, dict):
            used = await self.store.get_setting(USED_PREFIX + code_id)
            if used is not None and isinstance(used.value, dict):
                raise JoinCodeError(f"this join code was already used, by node {used.value.get('node')!r} at "
                                    f"{used.value.get('used_at')}; a code works once: make a new one with "
                                    "`llmgw ctl node join-code`")
            raise JoinCodeError("this control plane knows no such join code: it was never made here, was "
                                "revoked, or expired; make a new one with `llmgw ctl node join-code`")
        entry = setting.value
        if not hmac.compare_digest(str(entry.get("secret_sha256", "")), _hash(secret)):
            await self.store.append_audit(f"node:{node}", "nodes.join-refused", f"join-code:{code_id}",
                                          {"reason": "wrong secret", "peer": peer})
            raise JoinCodeError("this join code's secret is wrong (forged or mistyped); refused")
        expires = _when(entry.get("expires_at"))
        if expires is None or expires <= self.clock():
            await self.store.unset_setting(key, actor=ACTOR)
            await self.store.append_audit(f"node:{node}", "nodes.join-refused", f"join-code:{code_id}",
                                          {"reason": "expired", "peer": peer})
            raise JoinCodeError(f"this join code expired at {entry.get('expires_at')}; make a new one with "
                                "`llmgw ctl node join-code`")
        wanted = str(entry.get("name") or "")
        if wanted and wanted != node:
            raise JoinCodeError(f"this join code is for node {wanted!r}, not {node!r}; join with --name {wanted} "
                                "or make a code without --name", 400)
        if not await self.store.unset_setting(key, actor=ACTOR):  # another join took it a moment ago
            raise JoinCodeError("this join code was already used a moment ago; a code works once")
        now = self.clock().replace(microsecond=0)
        await self.store.set_setting(USED_PREFIX + code_id, {
            "node": node, "used_at": now.isoformat(), "peer": peer, "expires_at": entry.get("expires_at"),
        }, actor=ACTOR)
        await self.store.append_audit(f"node:{node}", "nodes.join", f"join-code:{code_id}",
                                      {"node": node, "peer": peer, "created_by": entry.get("created_by", "")})
        return entry

    async def _purge(self) -> None:
        """Forget codes past their expiry, and records of uses a day after the code's expiry."""
        now = self.clock()
        for key, setting in (await self.store.get_settings()).items():
            if not key.startswith((CODES_PREFIX, USED_PREFIX)) or not isinstance(setting.value, dict):
                continue
            expires = _when(setting.value.get("expires_at"))
            grace = dt.timedelta(days=1) if key.startswith(USED_PREFIX) else dt.timedelta(0)
            if expires is None or expires + grace <= now:
                await self.store.unset_setting(key, actor=ACTOR)


def _when(text: Any) -> dt.datetime | None:
    try:
        when = fromisoformat(str(text))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _say(ttl: dt.timedelta) -> str:
    seconds = int(ttl.total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
