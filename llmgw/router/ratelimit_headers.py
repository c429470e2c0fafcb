"""The rate-limit headers OpenAI's and Anthropic's services send, from the key's own limits.

OpenAI's answers carry `x-ratelimit-limit-requests`, `-remaining-requests`,
`-reset-requests` and the same for `-tokens` (the reset as a span, like
`6m0s`); Anthropic's carry `anthropic-ratelimit-requests-limit`,
`-remaining`, `-reset` and the same for `tokens` (the reset as an RFC 3339
time). Clients read them to slow down before a 429. Of the limits on a
key's chain (organization, team, project, person, key) each header tells
of the one with the least left; a key with no limit gets none of them.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

#: rpm / tpm -> the word in the headers' names.
_WHAT = {"rpm": "requests", "tpm": "tokens"}


def rate_headers(accountant: Any, principal: Any, *, anthropic: bool) -> dict[str, str]:
    """The headers for an answer to `principal`, in OpenAI's names or Anthropic's."""
    headroom = getattr(accountant, "headroom", None)
    if headroom is None or principal is None:
        return {}
    tightest: dict[str, Any] = {}
    for room in headroom(principal):
        what = room.rule.what
        if what in _WHAT and (what not in tightest or room.remaining < tightest[what].remaining):
            tightest[what] = room
    out: dict[str, str] = {}
    now = dt.datetime.now(dt.UTC)
    for what, room in tightest.items():
        word = _WHAT[what]
        if anthropic:
            at = (now + dt.timedelta(seconds=math.ceil(room.resets_in))).replace(microsecond=0)
            out[f"anthropic-ratelimit-{word}-limit"] = str(room.rule.limit)
            out[f"anthropic-ratelimit-{word}-remaining"] = str(room.remaining)
            out[f"anthropic-ratelimit-{word}-reset"] = at.isoformat().replace("+00:00", "Z")
        else:
            out[f"x-ratelimit-limit-{word}"] = str(room.rule.limit)
            out[f"x-ratelimit-remaining-{word}"] = str(room.remaining)
            out[f"x-ratelimit-reset-{word}"] = span(room.resets_in)
    return out


def span(seconds: float) -> str:
    """A wait as OpenAI writes it: 20ms, 1.5s, 6m0s."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 1):g}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest}s"


__all__ = ["rate_headers", "span"]
