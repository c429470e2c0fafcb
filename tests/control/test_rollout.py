"""A model's revisions, the parts that need no cluster: the new source, shares, the router's split, the state kept."""

from __future__ import annotations

import pytest

from llmgw.control.rollout import RolloutError, new_source, parse_weight
from llmgw.control.rollout_state import Canary, Previous, Rollouts
from llmgw.router.canary import CanarySplit, bucket, session_key


@pytest.mark.parametrize(("current", "to", "expected"), [
    ("acme/chat@v1", "v2", "acme/chat@v2"),
    ("acme/chat", "v2", "acme/chat@v2"),
    ("mirror:qwen3-4b/2025-06-01", "2025-07-01", "mirror:qwen3-4b/2025-07-01"),
    ("qwen3-4b/2025-06-01/Qwen3-4B-Q4_K_M.gguf", "2025-07-01", "qwen3-4b/2025-07-01/Qwen3-4B-Q4_K_M.gguf"),
    ("http://models.internal:8081/llava-7b/2025-06-01/llava-7b.gguf", "2025-07-01",
     "http://models.internal:8081/llava-7b/2025-07-01/llava-7b.gguf"),
    ("acme/chat@v1", "other/model@v9", "other/model@v9"),
])
def test_a_bare_revision_changes_the_revision_of_the_source_and_a_whole_source_replaces_it(current, to, expected):
    assert new_source(current, to) == expected


def test_a_source_with_no_revision_to_change_says_to_give_a_whole_one():
    with pytest.raises(RolloutError, match="names no revision to change; give the whole new source"):
        new_source("/srv/models/chat.gguf", "v2")
    with pytest.raises(RolloutError, match="to: give the new revision"):
        new_source("acme/chat@v1", " ")


@pytest.mark.parametrize(("given", "share"), [("10%", 10.0), (10, 10.0), ("2.5 %", 2.5), ("0", 0.0), (100, 100.0)])
def test_a_share_is_a_percent(given, share):
    assert parse_weight(given) == share


@pytest.mark.parametrize("given", ["ten", "-1%", "101", True])
def test_a_share_out_of_range_names_the_field(given):
    with pytest.raises(RolloutError, match="^weight: "):
        parse_weight(given)


def test_the_split_is_sticky_per_session_and_near_its_share():
    split = CanarySplit()
    split.set({"chat": ("chat-canary", 10.0)})
    keys = [session_key("key-1", {}, f"user-{n}") for n in range(20000)]
    sides = [split.side("chat", k, None) for k in keys]
    share = sides.count("chat-canary") / len(sides)
    assert 0.09 <= share <= 0.11
    assert [split.side("chat", k, None) for k in keys[:500]] == sides[:500]  # the same session, the same side
    assert split.side("chat", keys[0], "canary") == "chat-canary"
    assert split.side("chat", keys[0], "Stable") is None
    assert split.side("other", keys[0], "canary") is None  # no canary: the header changes nothing
    split.set({"chat": ("chat-canary", 0.0)})
    assert {split.side("chat", k, None) for k in keys[:500]} == {None}


def test_the_session_is_the_key_and_the_first_session_header_or_user():
    assert session_key("k", {"x-llmgw-session": "s1", "x-session-id": "s2"}, "u") == "k\x1fs1"
    assert session_key("k", {"x-llmgw-thread": "t"}, "u") == "k\x1ft"
    assert session_key("k", {}, "u") == "k\x1fu"
    assert session_key("", {}, None) == ""  # neither: drawn at random
    assert bucket("chat", "k\x1fu") != bucket("other", "k\x1fu")  # each model splits its own way


def test_the_state_kept_reads_back_and_leaves_out_what_is_damaged():
    state = Rollouts({"chat": Canary(model="chat", name="chat-canary", revision="acme/chat@v2", weight=10.0,
                                     serving=True)},
                     {"chat": Previous(model="chat", spec={"name": "chat"}, revision="acme/chat@v1", until=5.0)})
    again = Rollouts.from_setting(state.to_setting())
    assert again == state
    assert again.split() == {"chat": ("chat-canary", 10.0)}
    damaged = Rollouts.from_setting({"canaries": [{"model": "x"}, "nonsense"], "previous": 3})
    assert damaged == Rollouts()
    starting = Rollouts({"chat": Canary(model="chat", name="chat-canary", revision="r", weight=10.0)})
    assert starting.split() == {"chat": ("chat-canary", 0.0)}  # not serving yet: no share


async def test_every_control_plane_reads_the_same_split_with_its_catalog(tmp_path):
    from llmgw.control.catalog import Catalog
    from llmgw.control.rollout_state import ROLLOUTS_SETTING
    from llmgw.store import open_store

    from .conftest import ENGINES, model

    dsn = f"sqlite:///{tmp_path}/store.db"
    first, second = await open_store(dsn), await open_store(dsn)
    try:
        catalogs = [Catalog([model("chat")], store, ENGINES) for store in (first, second)]
        state = Rollouts({"chat": Canary(model="chat", name="chat-canary", revision="acme/chat@v2", weight=10.0,
                                         serving=True)})
        await first.set_setting(ROLLOUTS_SETTING, state.to_setting(), actor="ann")
        assert [await c.load() for c in catalogs] == [True, True]
        assert [c.rollouts.split() for c in catalogs] == [{"chat": ("chat-canary", 10.0)}] * 2
        assert [await c.load() for c in catalogs] == [False, False]  # nothing changed: nothing rebuilt
    finally:
        await first.close()
        await second.close()
