"""Scaling by the clock: a model's `scaling.schedule` windows and `scaling.prewarm`.

A window (`days`, `from`, `to`, `min`, optional `max`) is written in the
cluster's time zone (`control.timezone`). It belongs to the day it begins on;
one whose `to` is earlier than its `from` ends the next day (22:00 to 06:00).
While a window is open, or within `prewarm` of its opening, its `min` (and its
`max`, when it has one) replace the model's; where two are open at once, the
larger `min` and the larger `max` win. Outside every window, `scaling.min` and
`scaling.max` apply as written: a model with `min: 0` and office hours runs
nothing at night and is ready when people arrive.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Sequence

import attrs

from llmgw.config.server import Scaling, ScalingWindow

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_WEEK = 7 * 24 * 60  # minutes


@attrs.frozen
class Bounds:
    """The min and max that hold at one moment, and the window they come from ('' outside every window)."""

    min: int
    max: int
    window: str = ""
    opens_in: float = 0.0  #: seconds until the window opens, when it applies early by prewarm


def time_zone(name: str) -> dt.tzinfo:
    """The zone named, or ValueError naming what to write instead."""
    if name.upper() == "UTC":
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}: give an IANA name such as Europe/Berlin or UTC") from None


def parse_days(days: Sequence[str]) -> list[int]:
    """Day numbers (0 is Monday) from names and ranges: ["mon-fri"], ["sat", "sun"]."""
    out: list[int] = []
    for item in days:
        first, _, last = str(item).strip().lower().partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"{item!r} is not a day: write mon, tue, wed, thu, fri, sat, sun or a range like mon-fri")
        a, b = DAYS.index(first), DAYS.index(last or first)
        span = range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)]  # fri-mon wraps the week
        out.extend(d for d in span if d not in out)
    if not out:
        raise ValueError("no days: leave days out for every day, or name some (mon-fri)")
    return out


def parse_time(text: str) -> int:
    """Minutes past midnight of an HH:MM."""
    match = _TIME.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a time of day: write HH:MM, such as 08:00 or 18:30")
    return int(match.group(1)) * 60 + int(match.group(2))


def window_problems(scaling: Scaling) -> list[tuple[tuple, str]]:
    """What is wrong with a model's schedule and prewarm, as (path under scaling, sentence)."""
    problems: list[tuple[tuple, str]] = []
    for index, window in enumerate(scaling.schedule):
        at = ("schedule", index)
        wrong = len(problems)
        for key, check in (("days", lambda: parse_days(window.days)), ("from", lambda: parse_time(window.from_)),
                           ("to", lambda: parse_time(window.to))):
            try:
                check()
            except ValueError as exc:
                problems.append(((*at, key), str(exc)))
        if window.min < 0:
            problems.append(((*at, "min"), f"must be 0 or more, got {window.min}"))
        if window.max is not None and window.max < max(window.min, 0):
            problems.append(((*at, "max"), f"{window.max} is less than the window's min ({window.min})"))
        if len(problems) == wrong and parse_time(window.from_) == parse_time(window.to):
            problems.append(((*at, "to"), f"from and to are both {window.to}; give the window some length"))
    if scaling.prewarm.total_seconds() < 0:
        problems.append((("prewarm",), "must not be negative"))
    elif scaling.prewarm.total_seconds() > 24 * 3600:
        problems.append((("prewarm",), f"at most 24h, got {scaling.prewarm}"))
    return problems


def _spans(window: ScalingWindow) -> list[tuple[int, int]]:
    """The window's (start, end) minutes of the week, Monday 00:00 being 0; an end may pass the week's end."""
    start, end = parse_time(window.from_), parse_time(window.to)
    length = end - start if end > start else end + 24 * 60 - start
    return [(day * 24 * 60 + start, day * 24 * 60 + start + length) for day in parse_days(window.days)]


def bounds_at(scaling: Scaling, when: dt.datetime, zone: dt.tzinfo) -> Bounds:
    """The min and max `scaling` asks for at `when` (an aware time), its windows and prewarm applied."""
    if not scaling.schedule:
        return Bounds(scaling.min, scaling.max)
    local = when.astimezone(zone)
    now = local.weekday() * 24 * 60 + local.hour * 60 + local.minute + local.second / 60
    early = scaling.prewarm.total_seconds() / 60
    found: list[tuple[ScalingWindow, float]] = []
    for window in scaling.schedule:
        for start, end in _spans(window):
            for shift in (-_WEEK, 0, _WEEK):  # a window from Sunday night into Monday, seen from Monday
                s, e = start + shift, end + shift
                if s - early <= now < e:
                    found.append((window, max(0.0, (s - now) * 60)))
    if not found:
        return Bounds(scaling.min, scaling.max)
    low = max(w.min for w, _ in found)
    high = max(w.max if w.max is not None else scaling.max for w, _ in found)
    window, opens_in = max(found, key=lambda f: f[0].min)
    name = f"{','.join(window.days)} {window.from_}-{window.to}"
    return Bounds(low, max(high, low), name, opens_in)


__all__ = ["Bounds", "DAYS", "bounds_at", "parse_days", "parse_time", "time_zone", "window_problems"]
