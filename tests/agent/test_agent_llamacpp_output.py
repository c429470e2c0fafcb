"""Reading where llama.cpp put a model from its start-up output.

`llama_cpu_*.txt` were recorded from the CPU-only llama-server these tests
build, at its default verbosity and at `-lv 4`. `llama_cuda_*.txt` are
composed line for line in the format llama.cpp's CUDA builds print (this
suite has no GPU to record them on).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.llamacpp_output import describe_placement, gpu_placement_problem, read_llama_placement

DATA = Path(__file__).with_name("data")


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_a_cpu_only_build_given_gpus_says_so_and_the_shard_fails_in_words():
    p = read_llama_placement(lines("llama_cpu_build_given_gpus.txt"))
    assert p is not None and p.no_gpu and p.on_cpu and p.backend == "CPU"
    problem = gpu_placement_problem([0, 1], lines("llama_cpu_build_given_gpus.txt"))
    assert problem == (
        "placed on GPU 0, 1, but llama.cpp put the model on the CPU: this llama-server saw no GPU it could use "
        "(a build without CUDA, or a driver it cannot load); install a llama-server built with CUDA on this node, "
        "or give the profile no GPUs")


def test_host_buffers_only_at_trace_verbosity_is_the_cpu():
    p = read_llama_placement(lines("llama_cpu_lv4.txt"))
    assert p is not None and p.on_cpu
    assert p.host_buffers == {"CPU_Mapped": 4.05} and p.device_buffers == {}
    assert "CPU_Mapped buffers and none is on a GPU" in gpu_placement_problem([0], lines("llama_cpu_lv4.txt"))


def test_all_layers_on_a_card_may_run():
    p = read_llama_placement(lines("llama_cuda_offloaded.txt"))
    assert p is not None and not p.on_cpu
    assert (p.offloaded, p.total, p.backend) == (49, 49, "CUDA")
    assert p.device_buffers == {"CUDA0": 8148.38}
    assert p.devices == ("CUDA0: NVIDIA H100 80GB HBM3",)
    assert gpu_placement_problem([0], lines("llama_cuda_offloaded.txt")) is None
    assert describe_placement(p) == "CUDA, 49 of 49 layers offloaded, weights in CUDA0 (8148 MiB)"


def test_no_layer_offloaded_on_a_cuda_build_fails():
    problem = gpu_placement_problem([3], lines("llama_cuda_nothing_offloaded.txt"))
    assert problem is not None and problem.startswith(
        "placed on GPU 3, but llama.cpp put the model on the CPU: it offloaded 0 of 33 layers;")


def test_a_partial_offload_is_on_the_gpu_and_pinned_host_memory_is_host():
    p = read_llama_placement(lines("llama_cuda_partial.txt"))
    assert p is not None and not p.on_cpu
    assert p.host_buffers == {"CUDA_Host": 14880.01} and p.device_buffers == {"CUDA0": 21004.12}


@pytest.mark.parametrize("output", [[], ["main: server is listening on http://127.0.0.1:20001"]])
def test_output_that_says_nothing_is_no_verdict(output):
    assert read_llama_placement(output) is None
    assert gpu_placement_problem([0], output) is None


def test_a_shard_without_gpus_is_never_refused_for_the_cpu():
    assert gpu_placement_problem([], lines("llama_cpu_build_given_gpus.txt")) is None
