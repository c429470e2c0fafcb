"""One reconcile pass's placement: every decision of the pass through one `PlacementPass`.

The reconciler makes a `PlacementRound` at the start of each pass's
placement, from that pass's nodes, what holds them (its replicas and the
facility's held cards) and the facility's word, and asks it for every
decision of the pass: new replicas, replacements for draining nodes,
restarts. What a decision starts is held in the round at once (`launched`),
and what the pass stops is marked as going (`retired`), so the next decision
sees both: a capacity quota counts what was placed a moment ago, preemption
never picks the same victim twice, and a rack's power budget counts the
draw of what was just placed there. The decisions are the ones a fresh
`place()` over freshly listed holdings would make at each step
(tests/control/test_placement_speed.py compares them over whole passes).

Around placement proper (placement.py), the round applies what the facility
says (facility.py), as the reconciler did before:

- nodes held free (their own hold, or one of their domains') are kept out
  with the hold's words, as of the moment the round was made;
- nodes where even the model's smallest profile would pass a power budget
  are kept out with the budget's words;
- a placement whose chosen cards would pass a budget is tried again
  without that node, up to four times; then the model waits, and the
  decision names the budget.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from llmgw.config.server import FacilityConfig, ModelConfig
from llmgw.control.facility import DomainUse, Hold, PowerBook, _need_on, node_hold, replica_watts
from llmgw.control.inventory import Node
from llmgw.control.placement import Decision, Holding, PlacementPass, Rejection
from llmgw.control.quotas import Quotas
from llmgw.plugins.types import Engine

#: How many times a placement whose cards pass a power budget is tried again elsewhere.
BUDGET_TRIES = 4


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector held off while one pass places its replicas (it is synchronous: a fraction of a
    second). Each full collection walks every object of the process, and the allocations of thousands of
    decisions set several off: at 2,000 nodes they took some 40% of a pass (docs/performance.md). What a
    pass leaves is freed as it goes by reference counting; any cycle waits for the next collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def record_holdings(rec: Any, model_class: str, owner: str, spare: bool) -> list[Holding]:
    """What one replica record holds: rank 0 on its node, and each other rank of a replica over several nodes
    on its own (the same replica id: preempting or counting it is the whole replica's)."""
    head = Holding(
        replica_id=rec.id, model=rec.model, node=rec.node, gpus=rec.gpus, memory=rec.memory,
        cores=rec.cores, model_class=model_class, spare=spare, started=rec.created, owner=owner,
        leaving=bool(rec.retiring),
    )
    return [head, *(attrs.evolve(head, node=worker.node, gpus=worker.gpus)
                    for worker in rec.workers if worker.state != "gone")]


class _RoundBook(PowerBook):
    """A power book kept for a whole round: each domain's use worked out once and again only when something
    is placed in it, each node's need for a profile's shape worked out once, and the nodes a budget keeps a
    model's shapes off worked out again only for the domains something was placed in since."""

    def __init__(self, config: FacilityConfig, nodes: list[Node], holdings: Iterable[Holding]) -> None:
        holdings = list(holdings)
        super().__init__(config, nodes, holdings)
        self._placed: dict[str, float] = {}
        for h in holdings:
            node = self.nodes.get(h.node)
            if node is not None:
                self._placed[h.node] = self._placed.get(h.node, 0.0) + replica_watts(node, h.gpus, h.cores, config)
        self._uses: dict[str, DomainUse] = {}
        self._needs: dict[tuple[str, int, int], float] = {}
        self._placed_in: dict[str, int] = {}  #: budgeted domain -> replicas held in it during the round
        #: the profiles' (cards, cores) -> (node -> why a budget keeps them off, each domain's count when judged)
        self._kept: dict[tuple, tuple[dict[str, str], dict[str, int]]] = {}

    def use(self, domain: str) -> DomainUse:
        found = self._uses.get(domain)
        if found is None:
            found = self._uses[domain] = super().use(domain)
        return found

    def kept_out(self, model: Any) -> dict[str, str]:
        """As PowerBook's (the answer is the round's own: read it, do not change it)."""
        shapes = tuple((p.gpus, p.cores) for p in model.profiles)
        kept = self._kept.get(shapes)
        if kept is None:
            out: dict[str, str] = {}
            for node_id in self.nodes:
                if self.domains.get(node_id):
                    self._judge(node_id, shapes, out)
            self._kept[shapes] = (out, dict(self._placed_in))
            return out
        out, seen = kept
        changed = [d for d, n in self._placed_in.items() if seen.get(d) != n]
        if changed:
            for node_id in {node_id for d in changed for node_id in self.members.get(d, ())}:
                out.pop(node_id, None)
                self._judge(node_id, shapes, out)
            for d in changed:
                seen[d] = self._placed_in[d]
        return out

    def _judge(self, node_id: str, shapes: tuple, out: dict[str, str]) -> None:
        node = self.nodes[node_id]
        needs = [self._need(node, gpus, cores) for gpus, cores in shapes] or [0.0]
        why = self.refusal(node_id, min(needs))
        if why is not None:
            out[node_id] = why

    def _need(self, node: Node, gpus: int, cores: int) -> float:
        key = (node.id, gpus, cores)
        found = self._needs.get(key)
        if found is None:
            found = self._needs[key] = _need_on(node, gpus, cores, self.config)
        return found

    def hold(self, h: Holding) -> None:
        """A replica now draws on its node what `h` says."""
        node = self.nodes.get(h.node)
        if node is None:
            return
        watts = replica_watts(node, h.gpus, h.cores, self.config)
        self._placed[h.node] = self._placed.get(h.node, 0.0) + watts
        self.held.setdefault(h.replica_id, []).append((h.node, watts))
        self.node_draw[h.node] = self.config.node_watts + max(self._placed[h.node], self.node_measured[h.node])
        for domain in self.domains.get(h.node, ()):
            self._uses.pop(domain, None)
            self._placed_in[domain] = self._placed_in.get(domain, 0) + 1


class PlacementRound:
    """The decisions of one pass, through one `PlacementPass`, with the facility's holds and budgets applied."""

    def __init__(self, nodes: Iterable[Node], holdings: Iterable[Holding], *,
                 engines: Mapping[str, Engine] | None = None, facility: FacilityConfig | None = None,
                 holds: Mapping[str, Hold] | None = None, now: float = 0.0) -> None:
        self.nodes = list(nodes)
        holdings = list(holdings)
        self.placement = PlacementPass(self.nodes, holdings, engines=engines)
        facility = facility or FacilityConfig()
        self.book = _RoundBook(facility, self.nodes, holdings) if facility.budgets else None
        #: node -> why a hold keeps it free, as of `now`
        self.held_nodes: dict[str, str] = {}
        if holds:
            for node in self.nodes:
                hold = node_hold(holds, node.id, node.labels, now)
                if hold is not None:
                    self.held_nodes.setdefault(node.id, hold.words())

    def decide(self, model: ModelConfig, *, avoid: Iterable[str] = (), preempt: bool = True,
               quotas: Quotas | None = None, held_for: Mapping[str, str] | None = None) -> Decision:
        """Where the model's next replica goes now; nothing is held until `hold()` (or the reconciler's
        `launched`). `held_for`: nodes kept from the model, each with its reason (preemption's ledger)."""
        kept = dict(held_for or {})
        for node_id, words in self.held_nodes.items():
            kept.setdefault(node_id, words)
        book = self.book
        if book is not None:
            for node_id, why in book.kept_out(model).items():
                kept.setdefault(node_id, why)
        avoid = tuple(avoid)
        for _ in range(BUDGET_TRIES):
            decision = self.placement.decide(model, avoid=avoid, preempt=preempt, quotas=quotas,
                                             held_for=kept or None)
            if book is None or decision.placement is None:
                return decision
            refused = book.placement_refusal(decision.placement)
            if refused is None:
                return decision
            kept[refused[0]] = refused[1]
        others = tuple(r for r in decision.rejections if r.node != refused[0])
        return Decision(model.name, None, rejections=(*others, Rejection(refused[0], refused[1])),
                        nodes_considered=decision.nodes_considered)

    def hold(self, holding: Holding) -> None:
        """A replica now holds what `holding` says (its cards, memory, cores, and their power)."""
        self.placement.hold(holding)
        if self.book is not None:
            self.book.hold(holding)

    def relabel(self, replica_id: str, **changes: object) -> None:
        """What a replica's holdings say changes (being stopped, spare), not what they take."""
        self.placement.relabel(replica_id, **changes)


class ReconcileRound(PlacementRound):
    """A round kept in step with the reconciler's replica records as the pass launches and stops replicas:
    each launch held, each stop marked as going, and each model's replicas called spare (above its minimum)
    or not as its count of live replicas moves, as listing the records afresh would say."""

    def __init__(self, nodes: Iterable[Node], holdings: list[Holding], live: Mapping[str, int],
                 minimum: Callable[[str], int], **options: Any) -> None:
        super().__init__(nodes, holdings, **options)
        self.live = dict(live)  #: model -> its live replicas
        self.minimum = minimum  #: model -> the replicas it keeps at least, now
        self._replicas: dict[str, list[str]] = {}  #: model -> its replica ids, in the order held
        for h in holdings:
            if h.model:
                ids = self._replicas.setdefault(h.model, [])
                if not ids or ids[-1] != h.replica_id:
                    ids.append(h.replica_id)
        self.stale = False  #: something changed that the round cannot follow: make a new one

    def launched(self, rec: Any, model_class: str, owner: str) -> None:
        """`rec` was just placed (live, holding its cards)."""
        model = rec.model
        before = self.live.get(model, 0)
        self.live[model] = before + 1
        self._respare(model, before)
        for h in record_holdings(rec, model_class, owner, self.live[model] > self.minimum(model)):
            self.hold(h)
        self._replicas.setdefault(model, []).append(rec.id)

    def retired(self, rec: Any, was_live: bool) -> None:
        """`rec` is being stopped: it holds its node until it has stopped, but counts toward nothing."""
        self.relabel(rec.id, leaving=bool(rec.retiring))
        if was_live and not rec.live:
            before = self.live.get(rec.model, 0)
            self.live[rec.model] = before - 1
            self._respare(rec.model, before)

    def _respare(self, model: str, before: int) -> None:
        minimum = self.minimum(model)
        spare = self.live[model] > minimum
        if spare != (before > minimum):
            for replica_id in self._replicas.get(model, ()):
                self.relabel(replica_id, spare=spare)


__all__ = ["BUDGET_TRIES", "PlacementRound", "ReconcileRound", "collector_paused", "record_holdings"]
