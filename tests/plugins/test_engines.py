"""The first-party engines: command lines, keys by environment, screening."""

import pytest

from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import LaunchSpec


@pytest.fixture(scope="module")
def engines():
    return load_plugins(allow=None).engines()


def spec(**kw):
    base = dict(model="qwen", weights="/var/lib/llmgw/weights/qwen", host="127.0.0.1", port=8100,
                api_key="engine-key-123", gpus=(0, 1))
    base.update(kw)
    return LaunchSpec(**base)


@pytest.mark.parametrize("name", ["sim", "llamacpp", "vllm", "sglang", "trtllm"])
def test_the_key_never_appears_on_the_command_line(engines, name):
    plan = engines[name].plan(spec())
    assert "engine-key-123" not in " ".join(plan.argv)
    assert "engine-key-123" in plan.env.values()


@pytest.mark.parametrize("name", ["llamacpp", "vllm", "sglang", "trtllm"])
def test_gpu_engines_see_only_their_cards_in_bus_order(engines, name):
    env = engines[name].plan(spec()).env
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_vllm_tensor_parallel_follows_the_cards(engines):
    argv = list(engines["vllm"].plan(spec(gpus=(0, 1, 2, 3))).argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"


def test_llamacpp_on_cpu_offloads_nothing(engines):
    argv = list(engines["llamacpp"].plan(spec(gpus=(), cores=8)).argv)
    assert argv[argv.index("--n-gpu-layers") + 1] == "0"
    assert argv[argv.index("--threads") + 1] == "8"


@pytest.mark.parametrize("name,flag", [("vllm", "--trust-remote-code"), ("sglang", "--trust-remote-code"),
                                       ("trtllm", "--trust_remote_code"), ("llamacpp", "--slot-save-path")])
def test_flags_that_run_code_as_root_are_refused(engines, name, flag):
    problems = engines[name].validate([flag], {})
    assert problems and flag in problems[0] and "root" in problems[0]


@pytest.mark.parametrize("name", ["sim", "llamacpp", "vllm", "sglang", "trtllm"])
def test_environment_that_loads_code_is_refused(engines, name):
    problems = engines[name].validate([], {"LD_PRELOAD": "/tmp/x.so", "NCCL_NET_PLUGIN": "/tmp/y.so"})
    assert any("LD_PRELOAD" in p for p in problems) and any("NCCL_NET_PLUGIN" in p for p in problems)


def test_flags_llmgw_sets_itself_are_refused(engines):
    problems = engines["vllm"].validate(["--port=9000"], {})
    assert problems and "set by llmgw" in problems[0]


def test_ordinary_tuning_flags_pass(engines):
    assert engines["vllm"].validate(["--max-num-seqs", "128", "--gpu-memory-utilization=0.85"], {}) == []
