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

import aiohttp
import openai
import pytest
from adapters_cluster import Served
from adapter_files import sim_adapter

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
                "scaling": {"min": 0, "max": 1, "on_demand": True},
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

        # The engine forgets `one` behind the router's back (as a restarted engine would): the next request for
        # it is answered all the same, the adapter loaded into it again.
        assert (await unload_at_engine(served, "lazy", "one")) == 200
        forgot = await served.client.chat.completions.create(
            model="lazy:one", messages=[{"role": "user", "content": QUESTION}], max_tokens=8)
        assert forgot.choices[0].message.content.startswith("ONE:")
        log = served.server_log()
        assert "adapter forgotten by its engine" in log and "adapter loaded again" in log

        # While `one` answers a request, there is no room for `two`: refused, saying why.
        stream = await served.client.chat.completions.create(
            model="lazy:one", messages=[{"role": "user", "content": QUESTION}], max_tokens=600, stream=True)
        async for _ in stream:
            break
        with pytest.raises(openai.InternalServerError) as caught:
            await served.client.chat.completions.create(
                model="lazy:two", messages=[{"role": "user", "content": QUESTION}], max_tokens=4)
        assert caught.value.status_code == 503
        assert "every replica of lazy holds its max_adapters (1) adapters" in str(caught.value)
        await stream.close()

        # An adapter declared later: refused until the replicas are restarted, then served.
        three, three_sha = await served.mirror_file(sim_adapter(tmp_path / "files" / "three.json", "THREE:"),
                                                    "lazy-three")
        spec["adapters"].append({"name": "three", "source": three, "sha256": three_sha})
        replaced = await asyncio.to_thread(served.ctl, "model", "add", "--replace", "-", input=json.dumps(spec))
        assert replaced.returncode == 0, replaced.stderr
        with pytest.raises(openai.InternalServerError) as caught:
            await served.client.chat.completions.create(
                model="lazy:three", messages=[{"role": "user", "content": QUESTION}], max_tokens=8)
        assert "the replicas of lazy were started before adapter 'three' was declared; restart them" \
            in str(caught.value)
        restarted = await asyncio.to_thread(served.ctl, "model", "restart", "lazy")
        assert restarted.returncode == 0, restarted.stderr
        answer = await served.ask("lazy:three", QUESTION, max_tokens=8)
        assert answer.choices[0].message.content.startswith("THREE:")

        # Forgotten, and its file gone from the node: it cannot be loaded again, and the request gets a clear 503.
        assert any(rid.endswith("+three") for rid in await router_replicas(served))
        for held in (tmp_path / "weights").rglob("three.json"):
            held.unlink()
        assert (await unload_at_engine(served, "lazy", "three")) == 200
        with pytest.raises(openai.InternalServerError) as caught:
            await served.client.chat.completions.create(
                model="lazy:three", messages=[{"role": "user", "content": QUESTION}], max_tokens=8)
        assert caught.value.status_code == 503 and "refused load_lora_adapter of 'three'" in str(caught.value)
        assert not any(rid.endswith("+three") for rid in await router_replicas(served))  # not sent it there now


async def unload_at_engine(served: Served, model: str, adapter: str) -> int:
    """Unload `adapter` at the engine of `model`'s replica directly, as the router does not: the status."""
    [shard] = [s for s in served.agent.supervisor.shards() if s.model == model and not s.terminal]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{shard.port}/v1/unload_lora_adapter", json={"lora_name": adapter},
                             headers={"Authorization": f"Bearer {shard.api_key}"}) as resp:
            return resp.status


async def router_replicas(served: Served) -> set[str]:
    """The ids of the replicas the router sends requests to, as its metrics list them."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{served.ports['metrics']}/metrics") as resp:
            text = await resp.text()
    return {line.split('replica="', 1)[1].split('"', 1)[0] for line in text.splitlines()
            if line.startswith("llmgw_replica_healthy{") and 'replica="' in line}


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
