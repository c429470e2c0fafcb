"""Turning JSON into the admin API's attrs types and back.

One converter, built on server.yaml's (strict types, unknown keys refused,
durations and sizes as an operator writes them), with datetimes as ISO 8601
text. A body that does not fit its type becomes one `BadRequest` listing
every problem with its path: `scaling.min: expected an integer, got 'two'`.
"""

from __future__ import annotations

import datetime as dt
import difflib
from typing import Any

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)

from llmgw.config.errors import format_path
from llmgw.config.fields import yaml_key
from llmgw.config.load import make_converter
from llmgw.config.units import describe

__all__ = ["CONVERTER", "BadRequest", "structure", "unstructure"]


class BadRequest(Exception):
    """A request the API refuses with 400; the message says what was wrong and where."""


def _structure_datetime(value: Any, _: type) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a time like 2026-09-01T00:00:00Z, got {describe(value)}")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected a time like 2026-09-01T00:00:00Z, got {describe(value)}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _unstructure_datetime(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def build_converter() -> cattrs.Converter:
    conv = make_converter()
    conv.register_structure_hook(dt.datetime, _structure_datetime)
    conv.register_unstructure_hook(dt.datetime, _unstructure_datetime)
    return conv


CONVERTER = build_converter()


def structure(value: Any, cl: type, where: str = "body") -> Any:
    """`value` as an instance of `cl`; BadRequest naming every problem."""
    if attrs.has(cl) and not isinstance(value, dict):
        raise BadRequest(f"{where}: expected a JSON object, got {describe(value)}")
    try:
        return CONVERTER.structure(value, cl)
    except Exception as exc:  # noqa: BLE001 - every structuring failure is the caller's input
        problems = _problems(exc, ())
        raise BadRequest(f"{where}: " + "; ".join(problems or [str(exc)])) from None


def unstructure(value: Any) -> Any:
    return CONVERTER.unstructure(value)


def _problems(exc: BaseException, path: tuple) -> list[str]:
    if isinstance(exc, ClassValidationError):
        found: list[str] = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            found += _problems(sub, (*path, _key_of(exc.cl, note.name)))
        for sub in without:
            if isinstance(sub, ForbiddenExtraKeysError):
                known = [yaml_key(f) for f in attrs.fields(exc.cl)]
                for key in sorted(sub.extra_fields, key=str):
                    close = difflib.get_close_matches(str(key), known, n=1)
                    hint = f" (did you mean '{close[0]}'?)" if close else f"; known: {', '.join(known)}"
                    found.append(_at((*path, str(key)), f"unknown field{hint}"))
            else:
                found += _problems(sub, path)
        return found
    if isinstance(exc, IterableValidationError):
        found = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            found += _problems(sub, (*path, note.index))
        for sub in without:
            found += _problems(sub, path)
        return found
    if isinstance(exc, KeyError):
        return [_at(path, "required, and missing")]
    return [_at(path, str(exc))]


def _at(path: tuple, message: str) -> str:
    where = format_path(path)
    return f"{where}: {message}" if where else message


def _key_of(cl: type, attribute: str) -> str:
    for f in attrs.fields(cl):
        if f.name == attribute:
            return yaml_key(f)
    return attribute
