"""Turning JSON into the admin API's attrs types and back.

One converter, built on server.yaml's (strict types, unknown keys refused,
durations and sizes as an operator writes them), with datetimes as ISO 8601
text. A body that does not fit its type becomes one `BadRequest` listing
every problem with its path: `scaling.min: expected an integer, got 'two'`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import cattrs

from llmgw.config.errors import format_path
from llmgw.config.load import make_converter
from llmgw.config.structure_errors import flatten
from llmgw.config.units import describe
from llmgw.compat import fromisoformat

__all__ = ["CONVERTER", "BadRequest", "structure", "unstructure"]


class BadRequest(Exception):
    """A request the API refuses with 400; the message says what was wrong and where."""


def _structure_datetime(value: Any, _: type) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a time like 2026-09-01T00:00:00Z, got {describe(value)}")
    try:
        parsed = fromisoformat(value.replace("Z", "+00:00"))
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
    return [_at(where, message) for where, message in flatten(exc, path)]


def _at(path: tuple, message: str) -> str:
    where = format_path(path)
    return f"{where}: {message}" if where else message


