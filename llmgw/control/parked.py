"""Parked models kept in the store, so that a parking outlives the leader that made it.

The leader writes the set of parked models as one value under the reserved
setting `control.parked` (not a cluster setting: the settings API and the
in-force overlay only know the registry's keys):

    {model: {"reason": ..., "spec": <the model's definition when parked>, "failures": n, "at": iso time}}

It is written at the end of a reconcile pass when the set differs from what
was last written, and right after a retry; a store error is logged and the
next pass writes again. A control plane that becomes leader reads it before
its first pass places anything, and parks again each model whose definition
is still the stored one; the others (changed, or gone from the catalog) are
dropped at the next write. Nothing is written before the value has been
read, so a leader that could not read it does not wipe it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Mapping
from typing import Any

from llmgw.control.state import ModelState
from llmgw.obs import logs
from llmgw.compat import fromisoformat

__all__ = ["PARKED_ACTOR", "PARKED_SETTING", "ParkedRecord", "normalized", "parked_value"]

log = logs.get("llmgw.control.reconciler")

PARKED_SETTING = "control.parked"
PARKED_ACTOR = "control-plane"


def normalized(value: Any) -> Any:
    """`value` as it reads back from the store (tuples become lists), so the two compare equal."""
    return json.loads(json.dumps(value))


def _iso(wall: float) -> str | None:
    return dt.datetime.fromtimestamp(wall, dt.UTC).isoformat() if wall else None


def _wall(iso: Any) -> float:
    try:
        return fromisoformat(iso).timestamp() if isinstance(iso, str) else 0.0
    except ValueError:
        return 0.0


def parked_value(models: Mapping[str, ModelState]) -> dict[str, dict[str, Any]]:
    """The value kept for the parked models among `models` (one parked with no known definition is left out:
    the next pass unparks it anyway)."""
    return normalized({
        name: {"reason": st.park_reason, "spec": st.parked_for, "failures": st.failures, "at": _iso(st.parked_at)}
        for name, st in sorted(models.items()) if st.parked and st.parked_for is not None
    })


class ParkedRecord:
    """What the store holds of the parked models, as this leader last read or wrote it."""

    def __init__(self) -> None:
        #: the value last read or written; None until read (nothing is written before)
        self.written: dict[str, Any] | None = None
        self._lock = asyncio.Lock()
        self._failing = False  #: a store error was logged: the next is not, until one succeeds

    @property
    def loaded(self) -> bool:
        return self.written is not None

    def forget(self) -> None:
        """Leadership lost: the next leader's value is read again before anything is written."""
        self.written = None

    async def read(self, store: Any) -> dict[str, dict[str, Any]] | None:
        """The stored entries (well-formed ones only); None, logged, when the store could not be read."""
        try:
            kept = await store.get_setting(PARKED_SETTING)
        except Exception as exc:  # noqa: BLE001 - the store may be away: the next pass reads again
            self._problem("parked models not read back from the store; read again at the next pass", exc)
            return None
        self._failing = False
        value = kept.value if kept is not None and isinstance(kept.value, dict) else {}
        entries = {str(name): entry for name, entry in value.items() if isinstance(entry, dict)}
        self.written = value
        return entries

    async def write(self, store: Any, models: Mapping[str, ModelState]) -> bool:
        """Write the parked set when it differs from what was last written; False when the store refused."""
        if not self.loaded:
            return False
        async with self._lock:  # two writers at once: the one holding the lock writes the state as it is now
            value = parked_value(models)
            if value == self.written:
                return True
            try:
                await store.set_setting(PARKED_SETTING, value, actor=PARKED_ACTOR)
            except Exception as exc:  # noqa: BLE001 - never breaks a pass: the next one writes again
                self._problem("parked models not written to the store; written at the next pass", exc)
                return False
            self._failing = False
            self.written = value
            logs.event(log, "parked models written", models=sorted(value))
            return True

    def entry_state(self, st: ModelState, entry: Mapping[str, Any], spec: Any) -> None:
        """Park `st` as `entry` says (its definition `spec` being the stored one)."""
        st.parked, st.parked_for = True, spec
        st.park_reason = str(entry.get("reason") or "parked after failing every start")
        failures = entry.get("failures")
        st.failures = max(st.failures, failures if isinstance(failures, int) and not isinstance(failures, bool) else 0)
        st.parked_at = _wall(entry.get("at"))

    def _problem(self, what: str, exc: BaseException) -> None:
        if not self._failing:
            logs.event(log, what, logging.WARNING, error=str(exc))
        self._failing = True
