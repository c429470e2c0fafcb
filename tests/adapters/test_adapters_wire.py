"""The adapters a shard holds travel in its status and registration, as the agent kept them."""

from __future__ import annotations

from llmgw.adapters.fetching import held_meta, held_of
from llmgw.plugins.types import AdapterFile
from llmgw.wire import codec
from llmgw.wire import messages as wire

HELD = (wire.AdapterHeld(name="sql", path="/w/sql.gguf", loaded=True),)


def test_start_status_and_registration_carry_adapters():
    start = wire.StartShard(shard_id="r1", model="qwen", engine="sim", max_adapters=2,
                            adapters=(wire.AdapterSource(name="sql", source="m/v/sql.gguf", sha256="a" * 64,
                                                         scale=0.5),))
    status = wire.ShardStatus(shard_id="r1", state="ready", adapters=HELD)
    register = wire.Register(node_id="n1", shards=(wire.RunningShard(shard_id="r1", adapters=HELD),))
    for message in (start, status, register):
        assert codec.decode(codec.encode(message)) == message


def test_what_the_agent_keeps_says_what_was_loaded_at_start():
    files = [AdapterFile("sql", "/w/sql.gguf"), AdapterFile("docs", "/w/docs.gguf")]
    assert [a.loaded for a in held_of({"adapters": held_meta(files, 0, "runtime")})] == [True, True]
    assert [a.loaded for a in held_of({"adapters": held_meta(files, 1, "runtime")})] == [False, False]
    assert [a.loaded for a in held_of({"adapters": held_meta(files, 1, "start")})] == [True, True]
    assert held_of({}) == ()
