"""The control loop soaked in random events (tests/control/soak.py says what is checked, and how)."""

from __future__ import annotations

import logging

import pytest

from . import soak


@pytest.fixture(autouse=True)
def _quiet():
    # Thousands of passes log what they do; the invariants are what this test reads.
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def _assert_clean(failure, events) -> None:
    assert failure is None, soak.report(failure, events)


async def test_a_short_soak_breaks_nothing():
    failure, events = await soak.soak(11, 200, nodes=20, models=8, shrink_budget=60)
    _assert_clean(failure, events)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_thousands_of_events_on_hundreds_of_nodes_break_nothing(seed):
    failure, events = await soak.soak(seed, 3000, nodes=200, models=30, shrink_budget=300)
    _assert_clean(failure, events)


@pytest.mark.slow
async def test_a_broken_invariant_names_the_seed_and_the_shortest_events(monkeypatch):
    """A control plane that forgets to stop what it no longer wants leaks engines; the soak says so, with
    the seed and a short list of events that still shows it."""
    monkeypatch.setattr(soak.SimCluster, "_receive", _ignoring_stops(soak.SimCluster._receive))
    events = soak.make_events(5, 300, nodes=6, models=4)
    events.insert(len(events) // 2, ("scale", "m00", 0, 0))  # a model scaled to nothing, so something must stop
    failure = await soak.run_events(5, events)
    assert failure is not None and failure.invariant in ("engine leaked", "ghost replica", "card held twice")
    shortest = await soak.shrink(5, events, failure, budget=60)
    assert len(shortest) < len(events) / 2
    again = await soak.run_events(5, shortest)
    assert again is not None and again.invariant == failure.invariant
    text = soak.report(failure, shortest)
    assert text.startswith(f"soak seed 5 broke '{failure.invariant}' at event {failure.step}")
    assert repr(shortest[0]) in text


def _ignoring_stops(receive):
    def receive_but_never_stop(self, agent, message):
        if isinstance(message, soak.w.StopShard):
            return
        return receive(self, agent, message)

    return receive_but_never_stop


def test_the_command_line_runs_a_soak_and_says_what_it_found():
    lines = []
    assert soak.main(["--events", "150", "--seeds", "3-4", "--nodes", "8", "--models", "4"], out=lines.append) == 0
    assert [line.split(":")[0] for line in lines] == ["seed 3", "seed 4"]
    assert all("nothing broken" in line for line in lines)
