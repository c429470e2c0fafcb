"""Usage rows made fit for the store whatever the request held, and their
journal form.

``clean_row`` never refuses: control characters (NUL included) and lone
surrogates are written as escapes (``\\x00``, ``\\ud800``), a value longer
than its column takes is cut and ends in a marker saying how much was left
out (``…[+123]``), counts are brought into range, and metadata that is no
JSON object, or is larger than ``MAX_METADATA`` characters, is replaced by
a note saying so. The store's own checks (llmgw.store.validate) then pass.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from typing import Any

import attrs

from llmgw.store import UsageRow
from llmgw.compat import fromisoformat

UTC = dt.UTC
MAX_METADATA = 16_384
_INT_MAX = 2**63 - 1
_BAD = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_IDS = ("key_id", "project_id", "team_id", "org_id", "user_id")
#: column -> (longest text, may be empty)
_TEXTS = {
    "model_requested": (200, True), "model_served": (200, True), "replica": (200, True),
    "outcome": (64, False), "client_user": (256, True), "guard_action": (64, True),
    "guard_policy": (1024, True), "guard_category": (256, True),
}
_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros", "latency_ms")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(value: Any, max_len: int) -> str:
    """Text with no control character or lone surrogate, at most ``max_len`` characters."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    text = _BAD.sub(_escape, text)
    if len(text) <= max_len:
        return text
    marker = f"…[+{len(text)}]"
    keep = max(0, max_len - len(marker))
    return text[:keep] + f"…[+{len(text) - keep}]"


def _count(value: Any, lo: int = 0, hi: int = _INT_MAX, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float):
        if not math.isfinite(value):
            return default
        value = int(value)
    return min(hi, max(lo, value))


def _json_value(value: Any, depth: int = 0) -> Any:
    if depth > 20:
        return "…"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _BAD.sub(_escape, value)
    if isinstance(value, dict):
        return {clean_text(k, 256): _json_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, depth + 1) for v in value]
    return clean_text(repr(value), 256)


def _metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return {"llmgw_note": f"metadata left out: a {type(value).__name__}, not an object"}
    cleaned = _json_value(value)
    size = len(json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")))
    if size > MAX_METADATA:
        return {"llmgw_note": f"metadata of {size} characters left out (more than {MAX_METADATA})"}
    return cleaned


def _time(value: Any) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        return dt.datetime.now(UTC)
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def clean_row(row: UsageRow) -> UsageRow:
    """The row with every field in a form the store takes (see the module's doc)."""
    request_id = clean_text(row.request_id, 128) or f"req-{uuid.uuid4().hex}"
    ids = {name: (None if getattr(row, name) is None else clean_text(getattr(row, name), 128) or None)
           for name in _IDS}
    texts: dict[str, Any] = {}
    for name, (max_len, may_be_empty) in _TEXTS.items():
        value = getattr(row, name)
        if value is None and name in ("client_user", "guard_action", "guard_policy", "guard_category"):
            texts[name] = None
            continue
        text = clean_text(value, max_len)
        texts[name] = text if text or may_be_empty else "unknown"
    tags_in = row.tags if isinstance(row.tags, (list, tuple)) else ()
    tags = tuple(t for t in (clean_text(t, 100) for t in tags_in) if t)
    return attrs.evolve(
        row,
        request_id=request_id,
        at=_time(row.at),
        status=row.status if isinstance(row.status, int) and 100 <= row.status <= 599 else 500,
        ttft_ms=None if row.ttft_ms is None else _count(row.ttft_ms),
        guard_ms=None if row.guard_ms is None else _count(row.guard_ms),
        tags=tags,
        metadata=_metadata(row.metadata),
        **ids,
        **texts,
        **{name: _count(getattr(row, name)) for name in _COUNTS},
    )


def row_to_json(row: UsageRow) -> dict[str, Any]:
    """A cleaned row as a JSON object (for the journal)."""
    out = attrs.asdict(row, recurse=False)
    out["at"] = row.at.astimezone(UTC).isoformat()
    out["tags"] = list(row.tags)
    return out


def row_from_json(value: dict[str, Any]) -> UsageRow:
    """A row back from its journal form; ValueError/TypeError when it is not one."""
    fields = {f.name for f in attrs.fields(UsageRow)}
    data = {k: v for k, v in value.items() if k in fields}
    data["at"] = fromisoformat(data["at"])
    return UsageRow(**data)
