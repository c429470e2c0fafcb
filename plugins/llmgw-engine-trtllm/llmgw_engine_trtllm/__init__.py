"""The `trtllm` engine: TensorRT-LLM's trtllm-serve, NVIDIA GPUs only."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import COMMON_ENV, GPU_ENV, ArgPolicy, flag_table, gpu_env
from llmgw.plugins.engine_versions import dist_version
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class TrtllmEngine(Engine):
    name = "trtllm"
    description = "TensorRT-LLM's OpenAI-compatible server (trtllm-serve)"
    devices = ("gpu",)
    metrics = {
        "trtllm:num_requests_running": "running",
        "trtllm:num_requests_waiting": "waiting",
        "trtllm:kv_cache_utilization": "kv_cache_usage",
    }
    arguments = ArgPolicy(
        engine="trtllm",
        flags=flag_table(
            "--backend= --max_batch_size= --max_num_tokens= --max_seq_len= --max_beam_width= "
            "--kv_cache_free_gpu_memory_fraction= --pp_size= --ep_size= --cluster_size= --gpus_per_node= "
            "--num_postprocess_workers= --log_level= --reasoning_parser= --tool_parser= --max_input_len= "
            "--disable_gc --fail_fast_on_attention_window_too_large"
        ),
        managed=("--host", "--port", "--tp_size", "--tokenizer"),
        refused={
            "--trust_remote_code": "runs code from the model's repository",
            "--extra_llm_api_options": "reads a file it names",
            "--log_dir": "writes files to a folder it names",
            "--metadata_server_config_file": "reads a file it names",
            "--server_role": "joins a disaggregated cluster llmgw does not manage",
        },
        env=(*COMMON_ENV, "TRTLLM_*", "TLLM_*", "TORCH_*", "PYTORCH_*", "TOKENIZERS_*", "HF_*"),
        env_managed=(*GPU_ENV, "LLMGW_ENGINE_API_KEY", "HF_HUB_OFFLINE"),
    )

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        argv = [
            spec.binary or "trtllm-serve", spec.weights,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tp_size", str(max(1, len(spec.gpus))),
        ]
        argv += list(spec.args)
        env = {**spec.env, **gpu_env(spec), "LLMGW_ENGINE_API_KEY": spec.api_key, "HF_HUB_OFFLINE": "1"}
        return LaunchPlan(argv=argv, env=env, ready_path="/health")

    def version(self, binary=None):
        # Read from the environment's package metadata: importing the engine takes seconds and a GPU.
        return dist_version(binary, "tensorrt_llm", "tensorrt-llm")


@hookimpl
def llmgw_engines():
    return [TrtllmEngine()]
