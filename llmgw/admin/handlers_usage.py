"""Handlers of the usage endpoints: sums by group and period, and the CSV export.

One grouping is read from the store's hourly and daily sums, which are kept
for as long as the cluster runs. Several at once (`by=project,model`) are
not in the sums, so they are added up from the request records, which are
kept for `accounting.usage_retention`. Periods are whole hours or UTC days:
a span is widened to the start of its first hour (or day).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from aiohttp import web

from llmgw.admin.api_types import UsageReport, UsageRowOut
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.timespec import parse_when
from llmgw.store.records import USAGE_GROUPS

PERIODS = ("hour", "day", "month", "total")
#: Request records read at most for one export by several groups.
MAX_ROWS = 500_000
_PAGE = 10_000
_MEASURES = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros",
             "latency_ms")
_ROW_FIELD = {"org": "org_id", "team": "team_id", "project": "project_id", "user": "user_id", "key": "key_id"}

Key = tuple[dt.datetime | None, tuple[str | None, ...]]


def _groups(text: str, *, several: bool) -> list[str]:
    names = [g.strip() for g in text.split(",") if g.strip()]
    if names in ([], ["none"]):
        return []
    for g in names:
        if g not in USAGE_GROUPS:
            raise ApiError(400, f"by: {g!r} is not one of {', '.join(USAGE_GROUPS)} (or none)")
    if len(set(names)) != len(names):
        raise ApiError(400, f"by: {text!r} names a group twice")
    if len(names) > 1 and not several:
        raise ApiError(400, "by: one group at a time here; the CSV export (usage/export) takes several")
    return names


def _span(call: Call, since_text: str, until_text: str | None, period: str) -> tuple[dt.datetime, dt.datetime]:
    if period not in PERIODS:
        raise ApiError(400, f"period: {period!r} is not one of {', '.join(PERIODS)}")
    now = call.admin.now()
    since = parse_when(since_text, now, "since")
    until = parse_when(until_text, now, "until") or now
    assert since is not None
    if until <= since:
        raise ApiError(400, f"until ({until.isoformat()}) must be after since ({since.isoformat()})")
    return since, until


def _period_start(bucket: dt.datetime, period: str) -> dt.datetime | None:
    if period == "total":
        return None
    if period == "month":
        return bucket.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return bucket.replace(hour=0, minute=0, second=0, microsecond=0)
    return bucket.replace(minute=0, second=0, microsecond=0)


async def _scope(call: Call, text: str | None) -> dict[str, str]:
    if text is None:
        return {}
    scope = await call.tenancy().scope(text)
    return {"scope_kind": scope.kind, "scope_id": scope.id}


async def _sums(call: Call, groups: Sequence[str], period: str, since: dt.datetime, until: dt.datetime,
                scope: dict[str, str]) -> dict[Key, list[int]]:
    out: dict[Key, list[int]] = {}
    if len(groups) <= 1:
        base = "hour" if period == "hour" or (period == "total" and until - since <= dt.timedelta(days=31)) \
            else "day"
        start = _period_start(since, base)
        assert start is not None
        sums = await call.store.usage_sums(groups[0] if groups else None, base, start, until, **scope)
        for s in sums:
            key: Key = (_period_start(s.bucket, period), (s.group,) if groups else ())
            acc = out.setdefault(key, [0] * len(_MEASURES))
            for i, value in enumerate((s.requests, s.errors, s.prompt_tokens, s.completion_tokens,
                                       s.cached_tokens, s.cost_micros, s.latency_ms_sum)):
                acc[i] += value
        return out
    filters = {_ROW_FIELD[scope["scope_kind"]]: scope["scope_id"]} if scope else {}
    cursor, seen, read = until, set(), 0
    while True:
        page = await call.store.list_usage(since=since, until=cursor, limit=_PAGE, **filters)
        fresh = [r for r in page if r.request_id not in seen]
        for r in fresh:
            seen.add(r.request_id)
            dims = tuple(r.model if g == "model" else getattr(r, _ROW_FIELD[g]) for g in groups)
            acc = out.setdefault((_period_start(r.at, period), dims), [0] * len(_MEASURES))
            for i, value in enumerate((1, int(r.status >= 400), r.prompt_tokens, r.completion_tokens,
                                       r.cached_tokens, r.cost_micros, r.latency_ms)):
                acc[i] += value
        read += len(fresh)
        if read > MAX_ROWS:
            raise ApiError(413, f"more than {MAX_ROWS} requests in the span; narrow it, or group by one")
        if len(page) < _PAGE or not fresh:
            return out
        cursor = page[-1].at + dt.timedelta(microseconds=1)


class _Labels:
    """Ids as people know them: paths, emails; cached for one answer."""

    def __init__(self, call: Call) -> None:
        self.tenancy = call.tenancy()
        self.cache: dict[tuple[str, str], str] = {}

    async def of(self, group: str, value: str | None) -> str | None:
        if value is None or group == "model" or group == "key":
            return value
        if (group, value) not in self.cache:
            self.cache[(group, value)] = await self.tenancy.path_of(group, value)
        return self.cache[(group, value)]


def _ordered(sums: dict[Key, list[int]]) -> list[tuple[Key, list[int]]]:
    def order(item: tuple[Key, list[int]]) -> tuple:
        (start, dims), _ = item
        return (start or dt.datetime.min.replace(tzinfo=dt.UTC), tuple(d or "" for d in dims))

    return sorted(sums.items(), key=order)


async def get_usage(call: Call) -> UsageReport:
    """Requests, tokens, errors and cost summed by organization, team, project, person, key or model, per
    hour, day, month or over the whole span (`total`)."""
    q = call.query
    groups = _groups(q.by, several=False)
    since, until = _span(call, q.since, q.until, q.period)
    sums = await _sums(call, groups, q.period, since, until, await _scope(call, q.scope))
    labels = _Labels(call)
    rows = []
    for (start, dims), m in _ordered(sums):
        group = dims[0] if dims else None
        rows.append(UsageRowOut(
            period_start=start, group=group, label=await labels.of(groups[0], group) if groups else None,
            requests=m[0], errors=m[1], prompt_tokens=m[2], completion_tokens=m[3], cached_tokens=m[4],
            cost_micros=m[5], latency_ms_avg=round(m[6] / m[0], 1) if m[0] else 0.0,
        ))
    return UsageReport(by=",".join(groups) or "none", period=q.period, since=since, until=until,
                       currency=call.admin.config.prices.currency, rows=rows)


async def export_usage(call: Call) -> web.Response:
    """The same sums as CSV, one row per period and combination of groups (several at once, like
    by=project,model), with each group's id and name, for a spreadsheet or a bill."""
    q = call.query
    groups = _groups(q.by, several=True)
    since, until = _span(call, q.since, q.until, q.period)
    sums = await _sums(call, groups, q.period, since, until, await _scope(call, q.scope))
    currency = call.admin.config.prices.currency
    labels = _Labels(call)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header: list[str] = ["period_start"]
    for g in groups:
        header += [g, f"{g}_id"] if g not in ("model", "key") else [g]
    header += ["requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
               f"cost_{currency.lower()}", "latency_ms_avg"]
    writer.writerow(header)
    for (start, dims), m in _ordered(sums):
        row: list[Any] = [start.isoformat().replace("+00:00", "Z") if start else "total"]
        for g, value in zip(groups, dims):
            row += [await labels.of(g, value) or "", value or ""] if g not in ("model", "key") else [value or ""]
        cost = (Decimal(m[5]) / Decimal(1_000_000)).quantize(Decimal("0.000001"))
        row += [m[0], m[1], m[2], m[3], m[4], f"{cost}", f"{m[6] / m[0]:.1f}" if m[0] else "0.0"]
        writer.writerow(row)
    name = f"llmgw-usage-{since:%Y%m%d}-{until:%Y%m%d}.csv"
    return web.Response(text=out.getvalue(), content_type="text/csv", charset="utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})
