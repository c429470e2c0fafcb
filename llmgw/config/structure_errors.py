"""cattrs' nested structuring errors, flattened into (path, reason) pairs.

The configuration loader and the admin API both read user input into attrs
classes; both name each problem by its path, so the walk lives here once.
"""

from __future__ import annotations

import difflib
from typing import Callable

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from llmgw.config.fields import yaml_key

#: Says what is wrong with an unknown key `key` in class `cl` at `path`.
UnknownKey = Callable[[str, type, tuple], str]


def key_of(cl: type, attribute: str) -> str:
    """The name a user writes for an attribute (its YAML/JSON key)."""
    for f in attrs.fields(cl):
        if f.name == attribute:
            return yaml_key(f)
    return attribute


def closest_key(key: str, cl: type, path: tuple) -> str:
    """The plain answer to an unknown key: the nearest known one, else the list."""
    known = [yaml_key(f) for f in attrs.fields(cl)]
    close = difflib.get_close_matches(key, known, n=1)
    return f"unknown field (did you mean '{close[0]}'?)" if close else f"unknown field; known: {', '.join(known)}"


def flatten(exc: BaseException, path: tuple = (), unknown_key: UnknownKey = closest_key) -> list[tuple[tuple, str]]:
    """Every leaf problem under `exc`, with the path to it."""
    if isinstance(exc, ClassValidationError):
        found: list[tuple[tuple, str]] = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            found += flatten(sub, (*path, key_of(exc.cl, note.name)), unknown_key)
        for sub in without:
            if isinstance(sub, ForbiddenExtraKeysError):
                found += [((*path, str(k)), unknown_key(str(k), exc.cl, path))
                          for k in sorted(sub.extra_fields, key=str)]
            else:
                found += flatten(sub, path, unknown_key)
        return found
    if isinstance(exc, IterableValidationError):
        found = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            found += flatten(sub, (*path, note.index), unknown_key)
        for sub in without:
            found += flatten(sub, path, unknown_key)
        return found
    if isinstance(exc, KeyError):
        return [(path, "required, and missing")]
    if isinstance(exc, (ValueError, TypeError)):
        return [(path, str(exc))]
    return [(path, f"cannot be read: {exc}")]
