"""How each engine is started with a model's adapters."""

from __future__ import annotations

import pytest

from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import AdapterFile, LaunchSpec

ADAPTERS = (AdapterFile("sql", "/w/sql.gguf", 1.0), AdapterFile("docs", "/w/docs.gguf", 0.5))


@pytest.fixture(scope="module")
def engines():
    return load_plugins().engines()


def spec(**extra) -> LaunchSpec:
    return LaunchSpec(model="qwen", weights="/w/qwen.gguf", host="127.0.0.1", port=8000, api_key="k", **extra)


def test_llama_server_loads_every_adapter_at_scale_zero_in_order(engines):
    argv = " ".join(engines["llamacpp"].plan(spec(adapters=ADAPTERS)).argv)
    assert "--lora-scaled /w/sql.gguf:0 --lora-scaled /w/docs.gguf:0" in argv
    assert "--lora-init-without-apply" not in argv
    assert "--lora" not in " ".join(engines["llamacpp"].plan(spec()).argv)


def test_vllm_loads_them_at_start_or_makes_room_for_max_adapters_loaded_at_run_time(engines):
    plan = engines["vllm"].plan(spec(gpus=(0,), adapters=ADAPTERS))
    argv = " ".join(plan.argv)
    assert "--enable-lora --max-loras 2 --lora-modules sql=/w/sql.gguf docs=/w/docs.gguf" in argv
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plan.env
    plan = engines["vllm"].plan(spec(gpus=(0,), adapters=ADAPTERS, max_adapters=1))
    assert "--enable-lora --max-loras 1" in " ".join(plan.argv) and "--lora-modules" not in plan.argv
    assert plan.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "--enable-lora" not in engines["vllm"].plan(spec(gpus=(0,))).argv


def test_the_sim_engine_is_started_as_vllm_is(engines):
    argv = " ".join(engines["sim"].plan(spec(adapters=ADAPTERS)).argv)
    assert "--max-loras 2 --lora-modules sql=/w/sql.gguf --lora-modules docs=/w/docs.gguf" in argv
    argv = engines["sim"].plan(spec(adapters=ADAPTERS, max_adapters=3)).argv
    assert "--lora-modules" not in argv and argv[argv.index("--max-loras") + 1] == "3"


def test_a_profile_may_not_load_adapters_of_its_own(engines):
    assert engines["sim"].validate(["--lora-modules", "x=/etc/passwd"], {})
    assert engines["vllm"].validate(["--lora-modules", "x=/etc"], {})
    assert engines["llamacpp"].validate(["--lora", "/etc/x"], {})
    assert engines["vllm"].validate(["--max-lora-rank", "64"], {}) == []
