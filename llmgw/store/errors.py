"""The store's errors: one base class, a subclass per kind of refusal."""

from __future__ import annotations


class StoreError(Exception):
    """Anything the store refuses or cannot do."""


class NotFound(StoreError):
    """The thing named does not exist (a missing org, a key id nobody issued)."""


class Conflict(StoreError):
    """The change would break a rule about what may coexist: a name taken in its
    parent, or removing something that still has contents."""


class Invalid(StoreError):
    """The input is malformed or out of range; nothing was written."""


class StoreTooNew(StoreError):
    """The database holds a schema newer than this llmgw knows how to read."""

    def __init__(self, store_version: int, known_version: int) -> None:
        self.store_version = store_version
        self.known_version = known_version
        super().__init__(
            f"this store was written by a newer llmgw (schema version {store_version}, "
            f"this llmgw knows up to {known_version}): upgrade llmgw on this machine"
        )


class StoreUnavailable(StoreError):
    """The database could not be reached, even after reconnecting once."""


class WritesRefused(StoreUnavailable):
    """The database answers but refuses to write: its disk is full, or its file or folder is read-only.
    Reads still work; writes work again once the operator frees space or makes it writable."""
