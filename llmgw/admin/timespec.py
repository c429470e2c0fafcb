"""Times as people give them in queries: a date, an ISO 8601 time, or a span back from now."""

from __future__ import annotations

import datetime as dt

from llmgw.admin.errors import ApiError
from llmgw.config.units import Duration
from llmgw.compat import fromisoformat

FORMS = "2026-09-01, 2026-09-01T12:00:00Z, or a span back from now like 24h or 7d"


def parse_when(text: str | None, now: dt.datetime, what: str) -> dt.datetime | None:
    """None for None; else an aware UTC time, or ApiError 400 naming `what`."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        raise ApiError(400, f"{what}: empty; give {FORMS}")
    if text[0].isdigit() and len(text) >= 10 and text[4] == "-":
        try:
            when = fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ApiError(400, f"{what}: {text[:60]!r} is not a time; give {FORMS}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        when = when.astimezone(dt.UTC)
        if not dt.datetime(1970, 1, 2, tzinfo=dt.UTC) <= when <= dt.datetime(9000, 1, 1, tzinfo=dt.UTC):
            raise ApiError(400, f"{what}: {text[:60]!r} is out of range")
        return when
    try:
        span = Duration.parse(text)
    except ValueError:
        raise ApiError(400, f"{what}: {text[:60]!r} is not a time; give {FORMS}") from None
    if span.total_seconds() < 0 or span > dt.timedelta(days=36500):
        raise ApiError(400, f"{what}: {text[:60]!r}: a span back must be between 0 and 100 years")
    return now - span
