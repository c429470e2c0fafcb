"""The sim engine's adapters: loaded at start or while it runs, and answering as themselves."""

from __future__ import annotations

import aiohttp
import openai
from adapter_files import sim_adapter

ASK = [{"role": "user", "content": "Which table holds the orders?"}]


async def ask(url: str, model: str, **extra):
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as client:
        return await client.chat.completions.create(model=model, messages=ASK, max_tokens=16, seed=1, **extra)


async def test_an_adapter_loaded_at_start_answers_as_itself_and_the_base_does_not(sim, tmp_path):
    path = sim_adapter(tmp_path / "sql.json", "SQL:")
    engine = await sim(models=["qwen"], lora_modules=[f"sql={path}"])
    adapter, base = await ask(engine.url, "sql"), await ask(engine.url, "qwen")
    assert adapter.model == "sql" and adapter.choices[0].message.content.startswith("SQL:")
    assert base.model == "qwen" and not base.choices[0].message.content.startswith("SQL:")
    async with aiohttp.ClientSession() as http, http.get(engine.url + "/v1/models") as resp:
        listed = {m["id"]: m for m in (await resp.json())["data"]}
    assert listed["sql"]["parent"] == "qwen" and listed["sql"]["root"] == str(path)


async def test_a_file_that_is_not_json_still_gives_the_adapter_its_own_words(sim, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"\x00weights")
    engine = await sim(models=["qwen"], lora_modules=[f"a={tmp_path / 'a.bin'}"])
    assert (await ask(engine.url, "a")).choices[0].message.content != \
        (await ask(engine.url, "qwen")).choices[0].message.content


async def test_adapters_load_and_unload_while_it_runs_within_max_loras(sim, tmp_path):
    engine = await sim(models=["qwen"], max_loras=1)
    one, two = sim_adapter(tmp_path / "1.json", "ONE"), sim_adapter(tmp_path / "2.json", "TWO")
    async with aiohttp.ClientSession() as http:
        async def post(what, **body):
            async with http.post(f"{engine.url}/v1/{what}", json=body) as resp:
                return resp.status, await resp.text()

        assert (await post("load_lora_adapter", lora_name="one", lora_path=str(one)))[0] == 200
        status, text = await post("load_lora_adapter", lora_name="one", lora_path=str(one))
        assert status == 400 and "already been loaded" in text
        status, text = await post("load_lora_adapter", lora_name="two", lora_path=str(two))
        assert status == 400 and "at most 1 LoRA adapters (--max-loras)" in text
        assert (await ask(engine.url, "one")).choices[0].message.content.startswith("ONE")
        assert (await post("unload_lora_adapter", lora_name="one"))[0] == 200
        assert (await post("unload_lora_adapter", lora_name="one"))[0] == 404
        status, text = await post("load_lora_adapter", lora_name="two", lora_path=str(tmp_path / "none.json"))
        assert status == 400 and "cannot read" in text
    try:
        await ask(engine.url, "one")
    except openai.NotFoundError:
        pass
    else:
        raise AssertionError("an unloaded adapter still answered")
