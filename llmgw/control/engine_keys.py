"""Per-replica engine keys: each engine demands a key only the router knows.

A replica's key is an HMAC-SHA256 of its id under a secret every control
plane shares through the store (the setting `control.engine_key_secret`,
made by the first leader). So the leader that starts a replica and any leader
that later adopts it derive the same key without storing one per replica, and
the key never has to travel back from the node.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from llmgw.store import Store

#: The setting holding the shared secret (hex). Readers of settings see it; the admin API should not show it.
SECRET_SETTING = "control.engine_key_secret"
#: Keys start with this, so the log redactor (which masks llmgw-… words) hides them.
KEY_PREFIX = "llmgw-engine-"


class EngineKeys:
    """Derives each replica's engine key from the shared secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the engine key secret must be at least 16 bytes")
        self._secret = secret

    def key_for(self, replica_id: str) -> str:
        digest = hmac.new(self._secret, replica_id.encode("utf-8"), hashlib.sha256).hexdigest()
        return KEY_PREFIX + digest[:48]

    def __repr__(self) -> str:
        return "<EngineKeys>"


async def load_engine_keys(store: Store, *, actor: str) -> EngineKeys:
    """The cluster's engine keys: the secret from the store, made there the first time."""
    setting = await store.get_setting(SECRET_SETTING)
    if setting is None or not isinstance(setting.value, str) or len(setting.value) < 32:
        value = secrets.token_hex(32)
        await store.set_setting(SECRET_SETTING, value, actor=actor)
        # Two control planes starting at once: the one read back is the one both use.
        setting = await store.get_setting(SECRET_SETTING)
        value = setting.value if setting is not None else value
    else:
        value = setting.value
    return EngineKeys(bytes.fromhex(value))
