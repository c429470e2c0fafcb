"""A LoRA adapter answers through `base:adapter` on the sim engine, end to end.

A real `llmgw server`, the tests' agent running real sim engines, adapters
fetched from the mirror; the official openai SDK asks. One model loads its
adapter at start (from server.yaml); one added with `llmgw ctl model add`
holds one adapter at a time (max_adapters 1), loaded on first request, the
one unused longest unloaded to make room.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from adapters_cluster import Served
from conftest import sim_adapter

pytestmark = pytest.mark.slow

QUESTION = "Which table holds the orders?"


async def test_the_openai_sdk_asks_base_adapter_and_the_adapter_answers(tmp_path):
    served = Served(tmp_path, [])
    sql, sql_sha = await served.mirror_file(sim_adapter(tmp_path / "files" / "sql.json", "SQL says:"), "qwen-sql")
    served.models.append({"name": "qwen", "aliases": ["small"], "engine": "sim", "profiles": [{"name": "cpu"}],
                          "adapters": [{"name": "sql", "source": sql, "sha256": sql_sha}]})
    async with served:
        answer = await served.ask("qwen:sql", QUESTION, max_tokens=12)
        assert answer.choices[0].message.content.startswith("SQL says:"), answer
        base = await served.ask("qwen", QUESTION, max_tokens=12)
        assert not base.choices[0].message.content.startswith("SQL says:")
        assert (await served.ask("sql", QUESTION, max_tokens=12)).choices[0].message.content.startswith("SQL says:")
        listed = {m.id for m in (await served.client.models.list()).data}
        assert {"qwen", "qwen:sql"} <= listed
        [shard] = served.agent.supervisor.shards()
        assert f"sql={tmp_path}/weights/" in " ".join(shard.plan.argv)  # fetched from the mirror onto the node

        # A model added at run time, holding one adapter at a time, loaded when first asked for.
        one, one_sha = await served.mirror_file(sim_adapter(tmp_path / "files" / "one.json", "ONE:"), "lazy-one")
        two, two_sha = await served.mirror_file(sim_adapter(tmp_path / "files" / "two.json", "TWO:"), "lazy-two")
        spec = {"name": "lazy", "engine": "sim", "profiles": [{"name": "cpu"}], "max_adapters": 1,
                "adapters": [{"name": "one", "source": one, "sha256": one_sha},
                             {"name": "two", "source": two, "sha256": two_sha}]}
        added = await asyncio.to_thread(served.ctl, "model", "add", "-", input=json.dumps(spec))
        assert added.returncode == 0, added.stderr
        first = await served.ask("lazy:one", QUESTION, max_tokens=8)
        assert first.choices[0].message.content.startswith("ONE:")
        second = await served.ask("lazy:two", QUESTION, max_tokens=8)
        assert second.choices[0].message.content.startswith("TWO:")
        again = await served.ask("lazy:one", QUESTION, max_tokens=8)
        assert again.choices[0].message.content.startswith("ONE:")
        log = served.server_log()
        assert "adapter loaded" in log and "adapter unloaded to make room" in log


async def test_a_bad_sha256_fails_the_start_naming_the_adapter(tmp_path):
    served = Served(tmp_path, [])
    sql, _ = await served.mirror_file(sim_adapter(tmp_path / "files" / "sql.json", "SQL:"), "bad-sql")
    served.models.append({"name": "qwen", "engine": "sim", "profiles": [{"name": "cpu"}],
                          "adapters": [{"name": "sql", "source": sql, "sha256": "0" * 64}]})
    async with served:
        for _ in range(240):
            out = await asyncio.to_thread(served.ctl, "explain-placement", "qwen")
            if "adapter sql" in out.stdout:
                break
            await asyncio.sleep(0.5)
        assert "adapter sql" in out.stdout, out.stdout + out.stderr
