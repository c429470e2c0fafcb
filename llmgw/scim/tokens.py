"""SCIM bearer tokens: one per organization, its SHA-256 kept in the store.

`llmgw org scim-token ORG` makes a new one (the old one stops working) and
prints it once; `--revoke` removes it. The store keeps only the hash, in the
setting `scim.tokens` ({org id: hash}), so every control plane on the store
knows it and a copy of the store opens nothing. The token's organization is
the one the SCIM client provisions: its people and its teams.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from llmgw.store import Store

SETTING = "scim.tokens"
PREFIX = "llmgw-scim-"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


async def _tokens(store: Store) -> dict[str, str]:
    setting = await store.get_setting(SETTING)
    value = setting.value if setting is not None else None
    return dict(value) if isinstance(value, dict) else {}


async def issue(store: Store, org_id: str, *, actor: str) -> str:
    """A new token for the organization; the one it had before stops working."""
    token = PREFIX + secrets.token_urlsafe(32)
    tokens = await _tokens(store)
    tokens[org_id] = _hash(token)
    await store.set_setting(SETTING, tokens, actor=actor)
    return token


async def revoke(store: Store, org_id: str, *, actor: str) -> bool:
    tokens = await _tokens(store)
    if tokens.pop(org_id, None) is None:
        return False
    await store.set_setting(SETTING, tokens, actor=actor)
    return True


async def org_of(store: Store, token: str) -> str | None:
    """The organization whose token this is, or None."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    want = _hash(token)
    found = None
    for org_id, have in (await _tokens(store)).items():
        if isinstance(have, str) and hmac.compare_digest(have, want):
            found = org_id
    return found
