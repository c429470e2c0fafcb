"""The requests the benchmarks send: text of a given size, and the two routing workloads.

Sizes are in the sim engine's tokens (words and punctuation marks), so a
"1000-token system prompt" is 1000 tokens to the engine's prefix cache.
Everything is drawn from a seeded generator: every policy of a routing run
replays exactly the same requests in the same order.

- **Shared prefix**, as llm-d's benchmark builds it: users in groups, each
  group sharing a long system prompt, each request that prompt plus a short
  question of its own. Which group asks next is random.
- **Multi-turn chat**: conversations that each resend their whole history
  with every new user message, as chat clients do.
"""

from __future__ import annotations

import json
import random

import attrs

# Plain lowercase words: one sim token each, and ASCII, so a body fits a Lua string as is.
VOCABULARY = (
    "river valley bridge harbor signal market garden engine paper window silver"
    " forest report ledger meadow canal lantern station thunder copper orchard"
    " ribbon falcon timber quarry glacier compass beacon harvest mirror anchor"
    " velvet summit prairie cobalt island saddle marble pepper violet archive"
    " tunnel fabric cotton meteor parcel candle shelter voyage granite"
).split()


def words(rng: random.Random, count: int) -> str:
    """`count` tokens of text."""
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def chat_body(model: str, messages: list[dict], *, max_tokens: int, stream: bool,
              user: str | None = None) -> bytes:
    body: dict = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if user:
        body["user"] = user
    return json.dumps(body, separators=(",", ":")).encode()


# ---------------------------------------------------------------- shared prefix


@attrs.frozen
class SharedPrefix:
    """Groups of users sharing a system prompt (llm-d's shared-prefix workload)."""

    groups: int = 16
    system_tokens: int = 1000
    question_tokens: int = 50
    answer_tokens: int = 16
    requests: int = 600
    seed: int = 7

    def requests_in_order(self) -> list[tuple[int, list[dict]]]:
        """(group, messages) per request, in the order they are sent."""
        rng = random.Random(self.seed)
        systems = [f"group {g}: " + words(rng, self.system_tokens) for g in range(self.groups)]
        out = []
        for i in range(self.requests):
            g = rng.randrange(self.groups)
            out.append((g, [{"role": "system", "content": systems[g]},
                            {"role": "user", "content": f"question {i}: " + words(rng, self.question_tokens)}]))
        return out

    def working_set_blocks(self, block_size: int) -> int:
        """KV blocks the shared prompts fill when every one is cached once."""
        return self.groups * (self.system_tokens // block_size)


# ---------------------------------------------------------------- multi-turn chat


@attrs.frozen
class MultiTurn:
    """Conversations that resend their history with each turn."""

    conversations: int = 48
    turns: int = 6
    system_tokens: int = 200
    user_tokens: int = 120
    answer_tokens: int = 32
    seed: int = 7

    def opening(self, conversation: int) -> list[dict]:
        rng = random.Random(self.seed * 1_000_003 + conversation)
        # Each conversation has its own system prompt, so only its own history can hit.
        return [{"role": "system", "content": f"conversation {conversation}: " + words(rng, self.system_tokens)}]

    def user_message(self, conversation: int, turn: int) -> dict:
        rng = random.Random((self.seed * 1_000_003 + conversation) * 131 + turn)
        return {"role": "user", "content": f"turn {turn}: " + words(rng, self.user_tokens)}

    @property
    def requests(self) -> int:
        return self.conversations * self.turns
