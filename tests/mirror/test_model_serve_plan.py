"""What `ctl model serve` writes from a plan, and what it refuses before anything starts."""

from __future__ import annotations

import pytest

from llmgw.admin.convert import unstructure
from llmgw.admin.testing import gpu_node
from llmgw.control.job_driver import JobStopped
from llmgw.control.model_serve import ServeAsk, definition_for
from llmgw.control.rollout import RolloutError
from llmgw.mirror import plan

from test_mirror_plan import LLAMA_8B, cpu_node, machines

GiB = 1 << 30


def best_of(shape, *nodes, **options):
    result = plan.plan("m", [shape], machines(*nodes), **options)
    return next(c for c in result.candidates if c.fits)


def gguf_shape(weight_bytes: int = 2 * GiB) -> plan.ModelShape:
    return plan.ModelShape(file="chat-Q4_K_M.gguf", format="gguf", architecture="llama", layers=32, heads=32,
                           kv_heads=8, hidden=4096, head_dim=128, context=8192, quantisation="Q4_K_M",
                           weight_bytes=weight_bytes)


def test_original_weights_go_to_vllm_on_the_gpus_they_fit():
    shape = plan.shape_from_config(LLAMA_8B, name="meta-llama/Llama-3.1-8B")
    best = best_of(shape, gpu_node("gpu-a", gpus=2), cpu_node(memory=256 * GiB))
    spec = definition_for("llama", "http://mirror:8081/llama/2025-06-01", best, context=4096)
    assert spec == {"name": "llama", "source": "http://mirror:8081/llama/2025-06-01", "engine": "vllm",
                    "profiles": [{"name": "1x-h100-80g", "gpus": 1, "gpu_class": "h100-80g",
                                  "args": ["--max-model-len", "4096"]}]}


def test_a_gguf_goes_to_llamacpp_with_its_cards_first_and_the_cpus_as_the_fallback():
    best = best_of(gguf_shape(), gpu_node("gpu-a", gpus=1), cpu_node(memory=64 * GiB))
    spec = definition_for("chat", "chat/2025-06-01/chat-Q4_K_M.gguf", best, context=2048)
    assert spec["engine"] == "llamacpp"
    assert [p["name"] for p in spec["profiles"]] == ["1x-h100-80g", "cpu"]
    assert spec["profiles"][1] == {"name": "cpu", "args": ["--ctx-size", "2048"]}


def test_a_file_that_fits_only_on_cpus_is_refused_for_a_gpu_only_engine():
    best = best_of(gguf_shape(), cpu_node(memory=64 * GiB))
    with pytest.raises(JobStopped, match="fits only on CPUs here, and vllm runs it on GPUs only"):
        definition_for("chat", "chat/2025-06-01/chat-Q4_K_M.gguf", best, engine="vllm")


def test_an_engine_named_by_the_operator_is_kept():
    shape = plan.shape_from_config(LLAMA_8B, name="meta-llama/Llama-3.1-8B")
    spec = definition_for("llama", "llama/2025-06-01", best_of(shape, gpu_node("gpu-b", gpus=1)), engine="sglang",
                          context=2048)
    assert spec["engine"] == "sglang"
    assert spec["profiles"][0]["args"] == ["--context-length", "2048"]


@pytest.mark.parametrize("source, registry", [
    ("acme/tiny-GGUF", True), ("acme/tiny-GGUF@v2", True), ("Qwen/Qwen3-4B-GGUF", True),
    ("tiny", False), ("tiny/2025-06-01", False), ("tiny/2025-06-01/tiny-Q8_0.gguf", False),
    ("http://models:8081/tiny/2025-06-01", False), ("mirror:tiny/2025-06-01", False),
])
def test_a_registry_repository_is_told_from_a_model_on_the_mirror(source, registry):
    assert ServeAsk.parse({"source": source}).from_registry is registry


@pytest.mark.parametrize("body, field", [
    ({}, "source"), ({"source": " "}, "source"), ({"source": "a/b", "files": "*Q4*"}, "files"),
    ({"source": "a/b", "context": 0}, "context"), ({"source": "a/b", "concurrency": True}, "concurrency"),
    ({"source": "a/b", "engine": 3}, "engine"), ({"source": "a/b", "name": ["x"]}, "name"),
])
def test_a_bad_ask_names_its_field(body, field):
    with pytest.raises(RolloutError, match=f"{field}:"):
        ServeAsk.parse(body)
