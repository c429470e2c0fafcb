"""Choosing the replica for a request.

Among the replicas that are healthy and have room, in this order:

1. **Session affinity**: a session (`x-session-id`, else the body's `user`)
   goes back to the replica that served it last, while that replica has
   room and the session was seen within `router.affinity.session_ttl`.
2. **Prefix affinity**: the prompt's text is cut into blocks and each
   leading run of blocks hashed; the replica that served the longest
   matching run is preferred, since its prefix cache holds that start,
   unless it is busier than the least busy by more than `PREFIX_MARGIN`.
3. **Least outstanding**: requests in flight from this gateway plus the
   engine's own waiting queue as last scraped; ties go to the replica
   chosen least recently, which spreads an idle model's requests.

A key given a routing profile (llmgw.router.routing_profiles) is chosen
for otherwise: its profile's node labels leave out the replicas elsewhere,
and `latency` takes the least busy (a cached prefix breaking ties, no
session affinity), `cost` the cluster's own engines first, then
server.yaml's endpoints, then the rest, the least busy within each.

`Chooser.set_policy("round_robin" | "random")` replaces all three with a
baseline blind to affinity and load. No setting reaches it: it exists so
`llmgw bench routing` can compare the router with what simpler ones do.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import attrs

from llmgw.config.server import AffinityConfig, RoutingProfile
from llmgw.router.replicas import Replica


def admits(profile: RoutingProfile, replica: Replica) -> bool:
    """routing profiles: with labels, only a cluster replica on a node having them all serves the profile."""
    if not profile.labels:
        return True
    return replica.in_cluster and all(replica.labels.get(k) == v for k, v in profile.labels.items())

#: Characters of prompt text per prefix block (roughly 64 tokens).
BLOCK_CHARS = 256
#: Leading blocks hashed at most: prompts agree or differ in their first 8 KiB.
MAX_BLOCKS = 32
#: How much busier (requests outstanding) a prefix's replica may be than the least busy and still get it.
PREFIX_MARGIN = 4.0
#: Entries kept in each memory; the least recently used go first.
MAX_SESSIONS = 100_000
MAX_PREFIXES = 200_000
#: How the choice is made: the router's own, or a baseline for benchmarks (see set_policy).
POLICIES = ("affinity", "round_robin", "random")
#: routing profiles' cost-first: the cluster's own engines, then server.yaml's endpoints, then the rest (peers).
COST_RANK = {"control": 0, "static": 1}


@attrs.frozen
class Want:
    """What a request asks of the choice: its affinities, and replicas to avoid (a retry)."""

    session: str | None = None
    prefix: tuple[bytes, ...] = ()
    exclude: frozenset[str] = frozenset()
    #: residency: only replicas the cluster's own scheduler runs (llmgw.router.residency)
    cluster_only: bool = False
    #: routing profiles: the key's (llmgw.router.routing_profiles); None: chosen as always
    routing: RoutingProfile | None = None


def prompt_text(body: dict) -> str:
    """The text of a chat or completion request's prompt, as the prefix hashes see it."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, list):  # parts: text, images, …; only the text is hashed
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict)
                                  and isinstance(p.get("text"), str))
            elif not isinstance(content, str):
                content = ""
            parts.append(f"{message.get('role', '')}\x1f{content}\x1e")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        return first if isinstance(first, str) else ",".join(map(str, prompt[:4096]))
    return ""


def prefix_hashes(model: str, text: str) -> tuple[bytes, ...]:
    """A hash per leading run of whole blocks of `text`, shortest run first.

    A text shorter than one block is one block, so short identical prompts
    are recognised too; a longer text's last partial block is left out,
    since the next turn of a conversation extends it.
    """
    if not text:
        return ()
    count = min(MAX_BLOCKS, max(1, len(text) // BLOCK_CHARS))
    out = []
    digest = hashlib.blake2b(model.encode(), digest_size=8).digest()
    for k in range(count):
        block = text[k * BLOCK_CHARS:(k + 1) * BLOCK_CHARS]
        digest = hashlib.blake2b(digest + block.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        out.append(digest)
    return tuple(out)


class _Lru:
    """A bounded map whose entries expire `ttl` seconds after their last use (None: never)."""

    def __init__(self, limit: int, ttl: float | None) -> None:
        self.limit = limit
        self.ttl = ttl
        self._data: OrderedDict = OrderedDict()

    def get(self, key, now: float):
        item = self._data.get(key)
        if item is None:
            return None
        value, at = item
        if self.ttl is not None and now - at > self.ttl:
            del self._data[key]
            return None
        return value

    def put(self, key, value, now: float) -> None:
        self._data[key] = (value, now)
        self._data.move_to_end(key)
        while len(self._data) > self.limit:
            self._data.popitem(last=False)

    def forget_value(self, value) -> None:
        for key in [k for k, (v, _) in self._data.items() if v == value]:
            del self._data[key]

    def __len__(self) -> int:
        return len(self._data)


class Chooser:
    """Picks among candidate replicas and remembers whom each session and prefix went to."""

    def __init__(self, affinity: AffinityConfig, *, stale_after: float = 6.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.affinity = affinity
        self.stale_after = stale_after
        self.clock = clock
        self._sessions = _Lru(MAX_SESSIONS, affinity.session_ttl.total_seconds())
        self._prefixes = _Lru(MAX_PREFIXES, None)
        #: why the last choice was made (session, prefix, least): for metrics and tests
        self.reasons: dict[str, int] = {"session": 0, "prefix": 0, "least": 0, "latency": 0, "cost": 0}
        self.policy = "affinity"
        self._turns: dict[str, int] = {}
        self._rng = random.Random()

    def set_policy(self, policy: str, seed: int | None = None) -> None:
        """Choose by `policy` from now on (one of POLICIES); only benchmarks pick a baseline."""
        if policy not in POLICIES:
            raise ValueError(f"policy: one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        self.reasons.setdefault(policy, 0)
        self._rng = random.Random(seed)

    def choose(self, model: str, candidates: Sequence[Replica], want: Want) -> Replica | None:
        """The replica for a request among `candidates` (healthy, with room), or None; remembered."""
        if want.exclude:
            candidates = [r for r in candidates if r.id not in want.exclude]
        if want.cluster_only:
            candidates = [r for r in candidates if r.in_cluster]
        if want.routing is not None and want.routing.labels:  # routing profiles: only its nodes' replicas
            candidates = [r for r in candidates if admits(want.routing, r)]
        if not candidates:
            return None
        now = self.clock()
        picked, reason = self._pick(model, candidates, want, now)
        picked.last_chosen = now
        self.reasons[reason] += 1
        if want.session and self.affinity.session:
            self._sessions.put((model, want.session), picked.id, now)
        if want.prefix and self.affinity.prefix:
            for digest in want.prefix:
                self._prefixes.put(digest, picked.id, now)
        return picked

    def _pick(self, model: str, candidates: Sequence[Replica], want: Want, now: float) -> tuple[Replica, str]:
        if self.policy != "affinity":
            return self._baseline(model, candidates), self.policy
        prefer = want.routing.prefer if want.routing is not None else "default"
        if prefer != "default":  # routing profiles: latency-first, cost-first and the like
            return self._by_profile(candidates, want, prefer, now)
        by_id = {r.id: r for r in candidates}
        if want.session and self.affinity.session:
            rid = self._sessions.get((model, want.session), now)
            if rid in by_id:
                return by_id[rid], "session"
        loads = {r.id: r.outstanding(now, self.stale_after) for r in candidates}
        least = min(loads.values())
        if want.prefix and self.affinity.prefix:
            for digest in reversed(want.prefix):  # the longest run first
                rid = self._prefixes.get(digest, now)
                if rid is None:
                    continue
                if rid in by_id and loads[rid] <= least + PREFIX_MARGIN:
                    return by_id[rid], "prefix"
                break  # its replica is gone or too busy: shorter runs went to the same one
        best = min(candidates, key=lambda r: (loads[r.id], r.last_chosen))
        return best, "least"

    def _by_profile(self, candidates: Sequence[Replica], want: Want, prefer: str, now: float) -> tuple[Replica, str]:
        """routing profiles: the least busy (a cached prefix breaking ties), cheaper sources first for cost."""
        loads = {r.id: r.outstanding(now, self.stale_after) for r in candidates}
        warm: set[str] = set()
        if want.prefix and self.affinity.prefix:
            for digest in reversed(want.prefix):  # the longest cached run's replica
                rid = self._prefixes.get(digest, now)
                if rid is not None:
                    warm.add(rid)
                    break

        def key(r: Replica) -> tuple:
            rank = COST_RANK.get(r.source, len(COST_RANK)) if prefer == "cost" else 0
            return (rank, loads[r.id], r.id not in warm, r.last_chosen)

        return min(candidates, key=key), prefer

    def _baseline(self, model: str, candidates: Sequence[Replica]) -> Replica:
        """Round robin over the candidates in id order, or one at random: no affinity, no load."""
        if self.policy == "random":
            return self._rng.choice(candidates)
        turn = self._turns.get(model, 0)
        self._turns[model] = turn + 1
        return sorted(candidates, key=lambda r: r.id)[turn % len(candidates)]

    def forget_replica(self, replica_id: str) -> None:
        """Drop what points at a replica that is gone."""
        self._sessions.forget_value(replica_id)
        self._prefixes.forget_value(replica_id)
