"""What the reconciler remembers of its preemptions, so that they converge.

When a model stops replicas of lower classes to make room (placement.py
chooses which), each stopped replica's model is kept off the node it was
stopped on while the model it was stopped for still waits for a replica:
otherwise the next pass could start the victim again on the cards just
freed, and the two would take them from each other pass after pass. The
victim's decision names the node with `waiting: its cards were taken for
critical model X`, and `explain` says so while the victim is short of
replicas and the model it gave way to waits or runs on that node. Once that
model runs no replica there and waits for none, the victim may come back.

A model preempts at most once every `interval` seconds, so a model that
fails to start soon after its preemption does not stop replicas at every
pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

#: Seconds a model waits after one preemption before it may preempt again.
PREEMPT_INTERVAL = 10.0


@attrs.frozen
class Taken:
    """Cards a replica of `victim` held on `node` until it was stopped for `preemptor`."""

    victim: str
    node: str
    preemptor: str
    words: str  #: why the victim is kept off the node, as its decision and explain say it


def taken_words(preemptor: str, preemptor_class: str, guarantee: str = "") -> str:
    """The reason a victim gives for not coming back to the node its cards were taken on."""
    if guarantee:
        return f"waiting: its cards were taken for {preemptor}, within the guarantee of {guarantee}"
    return f"waiting: its cards were taken for {preemptor_class} model {preemptor}"


class PreemptionLedger:
    """The cards taken by preemption and when each model last preempted."""

    def __init__(self, interval: float = PREEMPT_INTERVAL) -> None:
        self.interval = interval
        self._taken: dict[str, dict[str, Taken]] = {}  # victim model -> node -> what was taken there
        self._last: dict[str, float] = {}  # preemptor -> when it last preempted (monotonic)
        self._waiting: set[str] = set()  # preemptors that still wait for a replica, as of the last settle

    def may_preempt(self, model: str, now: float) -> bool:
        """Whether `model` may stop replicas now (at most once every `interval` seconds)."""
        last = self._last.get(model)
        return last is None or now - last >= self.interval

    def wait_left(self, model: str, now: float) -> float:
        """Seconds until `model` may preempt again (0 when it may now)."""
        last = self._last.get(model)
        return 0.0 if last is None else max(0.0, self.interval - (now - last))

    def preempted(self, preemptor: str, words: str, victims: Iterable[tuple[str, Iterable[str]]],
                  now: float) -> None:
        """`preemptor` stopped replicas: each victim as (its model, the nodes it ran on)."""
        self._last[preemptor] = now
        self._waiting.add(preemptor)
        for victim, nodes in victims:
            for node in nodes:
                self._taken.setdefault(victim, {})[node] = Taken(victim, node, preemptor, words)

    def preemptors(self) -> set[str]:
        return {t.preemptor for by_node in self._taken.values() for t in by_node.values()}

    def victims(self) -> set[str]:
        return set(self._taken)

    def settle(self, waiting: set[str], running_on: set[tuple[str, str]], short: set[str]) -> None:
        """Forget what no longer keeps a victim off a node: the victim is short of nothing, or the model its
        cards went to neither waits for a replica (`waiting`) nor runs one there (`running_on`: (model, node))."""
        self._waiting = set(waiting)
        for victim, by_node in list(self._taken.items()):
            for node, taken in list(by_node.items()):
                if victim not in short or (taken.preemptor not in waiting
                                           and (taken.preemptor, node) not in running_on):
                    del by_node[node]
            if not by_node:
                del self._taken[victim]

    def held_for(self, model: str) -> Mapping[str, str]:
        """The nodes `model` is kept off now, each with its reason: those whose preemptor still waits."""
        by_node = self._taken.get(model)
        if not by_node:
            return {}
        return {node: t.words for node, t in by_node.items() if t.preemptor in self._waiting}

    def words(self, model: str) -> str:
        """Why `model` waits for cards preemption took from it, in words; empty when it does not."""
        by_node = self._taken.get(model) or {}
        reasons: dict[str, list[str]] = {}
        for node, taken in sorted(by_node.items()):
            reasons.setdefault(taken.words, []).append(node)
        return "; ".join(f"{words} (on {', '.join(nodes)})" for words, nodes in reasons.items())

    def clear(self) -> None:
        self._taken.clear()
        self._last.clear()
        self._waiting.clear()


__all__ = ["PREEMPT_INTERVAL", "PreemptionLedger", "Taken", "taken_words"]
