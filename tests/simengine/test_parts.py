"""The engine's parts on their own: tokenizer, prefix cache, slots, schema values."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from llmgw.simengine import structured, tokens
from llmgw.simengine.engine import Engine, _apply_stop
from llmgw.simengine.options import SimOptions
from llmgw.simengine.prefix_cache import PrefixCache
from llmgw.simengine.protocol import APIError, parse_chat
from llmgw.simengine.scheduler import BatchScheduler


def test_tokenize_splits_words_punctuation_and_chat_markers():
    assert tokens.tokenize("<|user|>\nHello, world!  It's 42.") == [
        "<|user|>", "Hello", ",", "world", "!", "It", "'", "s", "42", "."]


def test_generate_is_deterministic_readable_and_exact_in_length():
    a = tokens.generate(123, 50)
    assert a == tokens.generate(123, 50)
    assert a != tokens.generate(124, 50)
    assert len(a) == 50 and not a[0].startswith(" ")
    assert len(tokens.tokenize("".join(a))) == 50
    assert len(tokens.generate(5, 40_000)) == 40_000  # longer than the corpus
    assert tokens.generate(5, 0) == []


def test_split_text_joins_back():
    text = '{"a": [1, 2.5], "b": "x y"}'
    assert "".join(tokens.split_text(text)) == text
    assert "".join(tokens.split_text("end  ")) == "end  "


def test_prefix_cache_hits_leading_full_blocks_only():
    cache = PrefixCache(block_size=4, capacity=100)
    prompt = [f"t{i}" for i in range(18)]  # four full blocks and two tokens
    hashes = cache.block_hashes(prompt)
    assert len(hashes) == 4
    assert cache.match(hashes, len(prompt)) == 0
    cache.insert(hashes)
    assert cache.match(hashes, len(prompt)) == 16
    changed = prompt[:5] + ["other"] + prompt[6:]  # differs in the second block
    assert cache.match(cache.block_hashes(changed), len(changed)) == 4
    # Another root (another model) shares nothing.
    assert cache.match(cache.block_hashes(prompt, root=7), len(prompt)) == 0


def test_prefix_cache_always_leaves_the_last_token_to_compute():
    cache = PrefixCache(block_size=4, capacity=100)
    prompt = [f"t{i}" for i in range(8)]
    hashes = cache.block_hashes(prompt)
    cache.insert(hashes)
    assert cache.match(hashes, len(prompt)) == 4


def test_prefix_cache_evicts_the_least_recently_used():
    cache = PrefixCache(block_size=2, capacity=4)
    a = cache.block_hashes(["a1", "a2", "a3", "a4", "x"])
    b = cache.block_hashes(["b1", "b2", "b3", "b4", "x"])
    cache.insert(a)
    cache.insert(b)
    assert len(cache) == 4
    assert cache.match(a, 5) == 4
    cache.insert(cache.block_hashes(["c1", "c2", "x"]))  # evicts b's first block, a was used
    assert cache.match(a, 5) == 4
    assert cache.match(b, 5) == 0


async def test_scheduler_is_first_come_first_served_and_survives_cancellation():
    scheduler = BatchScheduler(1)
    order = []
    await scheduler.acquire()

    async def wait(name):
        await scheduler.acquire()
        order.append(name)

    first = asyncio.create_task(wait("first"))
    gone = asyncio.create_task(wait("gone"))
    third = asyncio.create_task(wait("third"))
    await asyncio.sleep(0)
    assert (scheduler.running, scheduler.waiting) == (1, 3)
    gone.cancel()
    await asyncio.sleep(0)
    assert scheduler.waiting == 2
    scheduler.release()
    await first
    scheduler.release()
    await third
    assert order == ["first", "third"]
    scheduler.release()
    assert (scheduler.running, scheduler.waiting) == (0, 0)


async def test_a_slot_handed_to_a_cancelled_waiter_is_passed_on():
    scheduler = BatchScheduler(1)
    await scheduler.acquire()
    a = asyncio.create_task(scheduler.acquire())
    b = asyncio.create_task(scheduler.acquire())
    await asyncio.sleep(0)
    scheduler.release()  # to a ...
    a.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await a
    await b
    assert (scheduler.running, scheduler.waiting) == (1, 0)


def test_schema_values_fill_required_properties():
    rng = random.Random(1)
    schema = {"type": "object", "required": ["email", "tags", "size", "nested", "choice"],
              "properties": {
                  "email": {"type": "string"},
                  "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                  "size": {"type": "integer", "minimum": 10, "maximum": 12},
                  "nested": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                  "choice": {"anyOf": [{"type": "null"}, {"type": "number"}]},
                  "optional": {"type": "string"}}}
    value = structured.object_for(schema, rng)
    assert set(value) == {"email", "tags", "size", "nested", "choice"}
    assert value["email"] == "alex@example.com"
    assert len(value["tags"]) == 2 and 10 <= value["size"] <= 12
    assert value["nested"] == {"ok": True}
    assert isinstance(value["choice"], float)
    json.dumps(value)


def test_stop_cuts_before_the_stop_string_and_counts_its_tokens():
    pieces = ["Hello", " big", " world", ".", " Next"]
    assert _apply_stop(pieces, ("world",)) == (["Hello", " big", " "], 3)
    assert _apply_stop(pieces, ("g wo",)) == (["Hello", " bi"], 3)
    assert _apply_stop(pieces, ("nothing",)) is None
    assert _apply_stop(pieces, (".", "big")) == (["Hello", " "], 2)


def test_chat_plans_read_openai_parameters():
    options = SimOptions(models=["m"])
    plan = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "stop": "x", "seed": 3, "stream": True,
                       "stream_options": {"include_usage": True}}, options)
    assert (plan.stop, plan.seed, plan.stream, plan.include_usage) == (("x",), 3, True, True)
    with pytest.raises(APIError) as err:
        parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": 3}, options)
    assert err.value.param == "stop"


def test_budget_without_max_tokens_stops_at_the_context():
    engine = Engine(SimOptions(context_length=10, max_tokens_default=100))
    plan = parse_chat({"messages": [{"role": "user", "content": "hi"}]}, engine.options)
    (budget, finish), = engine.budgets(plan)
    assert finish == "length" and budget == 10 - plan.prompt_tokens


def test_options_are_checked():
    with pytest.raises(ValueError, match="--max-num-seqs"):
        SimOptions(max_num_seqs=0)
    with pytest.raises(ValueError, match="--fail-rate"):
        SimOptions(fail_rate=2)
    with pytest.raises(ValueError, match="--model"):
        SimOptions(models=[])
    assert "k-1" not in repr(SimOptions(api_key="k-1"))
