"""Input checks shared by every backend: each returns the normalised value or
raises Invalid saying what was wrong and where."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from typing import Any

import attrs

from .errors import Invalid
from .records import UsageRow

UTC = dt.UTC

_HEX64 = re.compile(r"[0-9a-f]{64}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")
_BAND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_SETTING_KEY = re.compile(r"[a-z0-9_][a-z0-9_-]*(\.[a-z0-9_][a-z0-9_-]*)*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

MAX_NAME = 100
MAX_ID = 128
MAX_LIST_LIMIT = 10_000


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_text(value: Any, what: str, *, max_len: int = 200, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{what}: expected text, got {_type_name(value)}")
    if not value and not allow_empty:
        raise Invalid(f"{what}: must not be empty")
    if len(value) > max_len:
        raise Invalid(f"{what}: at most {max_len} characters, got {len(value)}")
    if _CONTROL.search(value):
        raise Invalid(f"{what}: must not hold control characters (newlines, tabs)")
    return value


def check_name(value: Any, what: str) -> str:
    """A name people give and type: trimmed, no '/' (paths like Acme/ml/train use it)."""
    if isinstance(value, str):
        value = value.strip()
    name = check_text(value, what, max_len=MAX_NAME)
    if "/" in name:
        raise Invalid(f"{what}: {name!r} must not contain '/' (it separates org/team/project)")
    return name


def check_id(value: Any, what: str) -> str:
    return check_text(value, what, max_len=MAX_ID)


def check_opt_id(value: Any, what: str) -> str | None:
    return None if value is None else check_id(value, what)


def check_email(value: Any) -> str:
    if isinstance(value, str):
        value = value.strip().lower()
    email = check_text(value, "email", max_len=254)
    if not _EMAIL.fullmatch(email):
        raise Invalid(f"email: {email!r} is not an address like name@example.com")
    return email


def check_choice(value: Any, choices: Sequence[str], what: str) -> str:
    if value not in choices:
        raise Invalid(f"{what}: {value!r} is not one of {', '.join(choices)}")
    return value


def check_time(value: Any, what: str) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise Invalid(f"{what}: expected a datetime, got {_type_name(value)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise Invalid(f"{what}: {value.isoformat()} has no timezone; give an aware datetime (UTC)")
    return value.astimezone(UTC)


def check_opt_time(value: Any, what: str) -> dt.datetime | None:
    return None if value is None else check_time(value, what)


def check_int(value: Any, what: str, *, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{what}: expected a whole number, got {_type_name(value)} {value!r}")
    if value < minimum or value > maximum:
        raise Invalid(f"{what}: must be between {minimum} and {maximum}, got {value}")
    return value


def check_opt_int(value: Any, what: str, *, minimum: int = 0) -> int | None:
    return None if value is None else check_int(value, what, minimum=minimum)


def check_limit(value: Any) -> int:
    return check_int(value, "limit", minimum=1, maximum=MAX_LIST_LIMIT)


def check_key_hash(value: Any) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise Invalid("key_hash: expected the SHA-256 of the key as 64 lower-case hex digits")
    return value


def check_prefix(value: Any) -> str:
    prefix = check_text(value, "prefix", max_len=32)
    if any(c.isspace() for c in prefix):
        raise Invalid(f"prefix: {prefix!r} must not contain spaces")
    return prefix


def check_band(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _BAND.fullmatch(value):
        raise Invalid(
            f"priority_band: {value!r} is not a band name (lower-case letters, digits, '-', '_')"
        )
    return value


def check_models(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise Invalid(f"{what}: expected a list of model names, got {_type_name(value)}")
    models: list[str] = []
    for i, model in enumerate(value):
        name = check_text(model, f"{what}[{i}]", max_len=MAX_NAME)
        if name in models:
            raise Invalid(f"{what}[{i}]: {name!r} is listed twice")
        models.append(name)
    return tuple(models)


def check_ttl(value: Any) -> dt.timedelta:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise Invalid(f"ttl: must be a finite number of seconds, got {value}")
        value = dt.timedelta(seconds=value)
    if not isinstance(value, dt.timedelta):
        raise Invalid(f"ttl: expected seconds or a timedelta, got {_type_name(value)}")
    if value <= dt.timedelta(0):
        raise Invalid(f"ttl: must be more than zero, got {value.total_seconds()}s")
    return value


def check_setting_key(value: Any) -> str:
    key = check_text(value, "setting key", max_len=MAX_NAME)
    if not _SETTING_KEY.fullmatch(key):
        raise Invalid(f"setting key: {key!r} is not a dotted lower-case name like router.timeouts.dial")
    return key


def to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise Invalid(f"{what}: not a JSON value ({e})") from None


def check_detail(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid(f"{what}: expected a mapping, got {_type_name(value)}")
    return to_json(value, what)


def check_usage_row(row: Any, index: int) -> UsageRow:
    """A usage row normalised (UTC, tuples), or Invalid naming the row."""
    if not isinstance(row, UsageRow):
        raise Invalid(f"usage row {index}: expected a UsageRow, got {_type_name(row)}")
    where = f"usage row {index} ({row.request_id!r})"
    check_id(row.request_id, f"usage row {index}: request_id")
    ids = {
        name: check_opt_id(getattr(row, name), f"{where}: {name}")
        for name in ("key_id", "project_id", "team_id", "org_id", "user_id")
    }
    texts = {
        name: check_text(getattr(row, name), f"{where}: {name}", allow_empty=True)
        for name in ("model_requested", "model_served", "replica")
    }
    counts = {
        name: check_int(getattr(row, name), f"{where}: {name}")
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros", "latency_ms")
    }
    if row.tags is None or isinstance(row.tags, str) or not isinstance(row.tags, Sequence):
        raise Invalid(f"{where}: tags: expected a list of text, got {_type_name(row.tags)}")
    tags = tuple(check_text(t, f"{where}: tags[{i}]", max_len=MAX_NAME) for i, t in enumerate(row.tags))
    if row.metadata is not None:
        check_detail(row.metadata, f"{where}: metadata")
    return attrs.evolve(
        row,
        at=check_time(row.at, f"{where}: at"),
        status=check_int(row.status, f"{where}: status", minimum=100, maximum=599),
        outcome=check_text(row.outcome, f"{where}: outcome", max_len=64),
        ttft_ms=check_opt_int(row.ttft_ms, f"{where}: ttft_ms"),
        client_user=(
            None
            if row.client_user is None
            else check_text(row.client_user, f"{where}: client_user", max_len=256, allow_empty=True)
        ),
        tags=tags,
        guard_action=_opt_text(row.guard_action, f"{where}: guard_action", 64),
        guard_policy=_opt_text(row.guard_policy, f"{where}: guard_policy", 1024),
        guard_category=_opt_text(row.guard_category, f"{where}: guard_category", 256),
        guard_ms=check_opt_int(row.guard_ms, f"{where}: guard_ms"),
        **ids,
        **texts,
        **counts,
    )


def _opt_text(value: Any, what: str, max_len: int) -> str | None:
    return None if value is None else check_text(value, what, max_len=max_len, allow_empty=True)
