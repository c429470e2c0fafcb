"""One replica over two nodes: the vLLM and SGLang command lines each rank is started with."""

import pytest

from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import LaunchSpec


@pytest.fixture(scope="module")
def engines():
    return load_plugins(allow=None).engines()


def rank(r: int, **kw):
    base = dict(model="llama-405b", weights="/var/lib/llmgw/weights/llama-405b", host="0.0.0.0", port=20001,
                api_key="engine-key-123", gpus=tuple(range(8)), nnodes=2, node_rank=r, head_address="10.1.0.11",
                dist_port=29500)
    base.update(kw)
    return LaunchSpec(**base)


def value(argv, flag):
    argv = list(argv)
    return argv[argv.index(flag) + 1]


def test_vllm_ranks_share_one_tensor_parallel_group_and_the_workers_run_headless(engines):
    head, worker = (engines["vllm"].plan(rank(r)) for r in (0, 1))
    for plan, r in ((head, "0"), (worker, "1")):
        assert value(plan.argv, "--tensor-parallel-size") == "16"  # 8 cards × 2 nodes
        assert value(plan.argv, "--distributed-executor-backend") == "mp"
        assert value(plan.argv, "--nnodes") == "2" and value(plan.argv, "--node-rank") == r
        assert value(plan.argv, "--master-addr") == "10.1.0.11" and value(plan.argv, "--master-port") == "29500"
        assert plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert "--headless" not in head.argv and head.ready_path == "/health"
    assert head.env["VLLM_API_KEY"] == "engine-key-123"
    # The worker serves no HTTP: rank 0's answer is the replica's; it is not given the key.
    assert "--headless" in worker.argv and worker.ready_path == "" and worker.metrics_path is None
    assert "engine-key-123" not in worker.env.values()


def test_vllm_pipeline_parallel_over_the_nodes(engines):
    plan = engines["vllm"].plan(rank(0, tensor_parallel=8, pipeline_parallel=2))
    assert value(plan.argv, "--tensor-parallel-size") == "8"
    assert value(plan.argv, "--pipeline-parallel-size") == "2"


def test_sglang_ranks_meet_at_rank_0s_dist_init_address(engines):
    head, worker = (engines["sglang"].plan(rank(r)) for r in (0, 1))
    for plan, r in ((head, "0"), (worker, "1")):
        assert value(plan.argv, "--tp-size") == "16"
        assert value(plan.argv, "--nnodes") == "2" and value(plan.argv, "--node-rank") == r
        assert value(plan.argv, "--dist-init-addr") == "10.1.0.11:29500"
    assert value(head.argv, "--api-key") == "${LLMGW_ENGINE_API_KEY}" and head.ready_path == "/health"
    assert "--api-key" not in worker.argv and "engine-key-123" not in worker.env.values()
    assert worker.ready_path == ""


def test_one_node_has_no_multi_node_flags(engines):
    for name in ("vllm", "sglang"):
        argv = engines[name].plan(rank(0, nnodes=1, head_address="", dist_port=0)).argv
        assert not {"--nnodes", "--node-rank", "--master-addr", "--dist-init-addr", "--headless"} & set(argv)
