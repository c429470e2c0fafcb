"""Scaling by the clock: windows of the week with their own min and max, prewarm, the cluster's time zone."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.config.load import ConfigError, parse_server_config
from llmgw.control.catalog import CatalogError, parse_model
from llmgw.control.explain import explain, explain_text
from llmgw.control.schedules import bounds_at, time_zone

from .conftest import Harness, control, model, register

BERLIN = time_zone("Europe/Berlin")
OFFICE = {"min": 0, "max": 3, "prewarm": "10m", "idle_timeout": "5m",
          "schedule": [{"days": ["mon-fri"], "from": "08:00", "to": "18:00", "min": 2},
                       {"days": ["fri"], "from": "22:00", "to": "06:00", "min": 1, "max": 1}]}


def at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    """A time in Berlin in the week of Monday 2025-03-10 (day 0 is that Monday)."""
    return dt.datetime(2025, 3, 10 + day, hour, minute, tzinfo=BERLIN)


def office(**scaling):
    return parse_model({"name": "office", "engine": "sim", "profiles": [{"name": "d"}],
                        "scaling": {**OFFICE, **scaling}})


@pytest.mark.parametrize(("when", "expect"), [
    (at(0, 7, 49), (0, 3, "")),  # Monday, before the prewarm
    (at(0, 7, 50), (2, 3, "mon-fri 08:00-18:00")),  # prewarm: ten minutes early
    (at(2, 12), (2, 3, "mon-fri 08:00-18:00")),
    (at(2, 18), (0, 3, "")),  # `to` is when it has ended
    (at(4, 23), (1, 1, "fri 22:00-06:00")),  # Friday night, its own max
    (at(5, 5, 59), (1, 1, "fri 22:00-06:00")),  # past midnight, into Saturday
    (at(5, 6), (0, 3, "")),
    (at(6, 23, 55), (0, 3, "")),  # Sunday night: Monday's window is not within the prewarm yet
])
def test_the_window_open_at_a_moment_gives_min_and_max(when, expect):
    b = bounds_at(office().scaling, when, BERLIN)
    assert (b.min, b.max, b.window) == expect


def test_a_window_is_read_in_the_clusters_time_zone_and_prewarm_crosses_the_week():
    scaling = parse_model({"name": "m", "engine": "sim", "profiles": [{"name": "d"}], "scaling": {
        "min": 0, "max": 2, "prewarm": "30m", "schedule": [{"days": ["mon"], "from": "00:10", "to": "01:00", "min": 2}],
    }}).scaling
    # Monday 00:20 UTC is 01:20 in Berlin in March: the same instant, two answers by zone.
    instant = dt.datetime(2025, 3, 10, 0, 20, tzinfo=dt.timezone.utc)
    assert bounds_at(scaling, instant, dt.timezone.utc).min == 2
    assert bounds_at(scaling, instant, BERLIN).min == 0
    # Sunday 23:45 is within 30 minutes of Monday 00:10: prewarmed across the week's end.
    sunday = bounds_at(scaling, dt.datetime(2025, 3, 16, 23, 45, tzinfo=dt.timezone.utc), dt.timezone.utc)
    assert sunday.min == 2 and sunday.opens_in == 25 * 60


def test_overlapping_windows_take_the_larger_min_and_max():
    scaling = office(schedule=[{"from": "08:00", "to": "12:00", "min": 1, "max": 2},
                               {"days": ["mon"], "from": "09:00", "to": "10:00", "min": 3}]).scaling
    b = bounds_at(scaling, at(0, 9, 30), BERLIN)
    assert (b.min, b.max) == (3, 3)


async def test_the_reconciler_starts_a_windows_replicas_before_it_and_lets_them_idle_out_after():
    h = Harness([office()], config=control(timezone="Europe/Berlin"))
    when = [at(0, 7, 40)]
    h.rec.wall_clock = lambda: when[0].timestamp()
    h.connect(register("node-a"))
    await h.tick()
    assert h.agents.starts() == []  # night: min 0
    info = explain(h.rec, "office")
    assert info["scaling"]["schedule"]["window"] == ""
    assert "outside every window (Europe/Berlin)" in explain_text(info)

    when[0] = at(0, 7, 51)  # nine minutes before the window: prewarm
    started = await h.start_ready()
    assert len(started) == 2
    info = explain(h.rec, "office")
    assert info["wanted"] == 2 and info["scaling"]["schedule"]["opens_in_s"] == 9 * 60
    assert "min 2, max 3 for the window mon-fri 08:00-18:00 (Europe/Berlin), prewarmed: it opens in 540 s" \
        in explain_text(info)

    when[0] = at(0, 18, 1)  # after the window: back to min 0, replicas stop once idle
    await h.tick(60)
    assert h.agents.stops() == []  # used a minute ago: not idle yet
    await h.tick(6 * 60)
    assert len(h.agents.stops()) == 2


def test_a_wrong_schedule_is_refused_naming_the_window_and_the_key():
    with pytest.raises(CatalogError, match=r"scaling\.schedule\[0\]\.from: '8am' is not a time of day"):
        office(schedule=[{"from": "8am", "to": "18:00", "min": 1}])
    with pytest.raises(CatalogError, match=r"scaling\.schedule\[0\]\.days: 'weekdays' is not a day"):
        office(schedule=[{"days": ["weekdays"], "from": "08:00", "to": "18:00", "min": 1}])
    with pytest.raises(CatalogError, match=r"scaling\.schedule\[0\]\.max: 1 is less than the window's min \(2\)"):
        office(schedule=[{"from": "08:00", "to": "18:00", "min": 2, "max": 1}])
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"control": {"timezone": "Mars/Olympus"}, "models": [
            {"name": "m", "engine": "sim", "profiles": [{"name": "d"}],
             "scaling": {"schedule": [{"from": "08:00", "to": "08:00", "min": 1}]}}]})
    text = str(caught.value)
    assert "control.timezone: unknown time zone 'Mars/Olympus'" in text
    assert "models[0].scaling.schedule[0].to: from and to are both 08:00" in text
