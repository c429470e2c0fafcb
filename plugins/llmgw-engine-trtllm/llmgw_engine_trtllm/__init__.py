"""The `trtllm` engine: TensorRT-LLM's trtllm-serve, NVIDIA GPUs only."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import gpu_env, screen
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
    _managed = ("--host", "--port", "--tp_size", "--tokenizer")
    _denied = ("--trust_remote_code", "--extra_llm_api_options", "--log_dir")

    def validate(self, args, env):
        return screen(args, env, denied_flags=self._denied, managed_flags=self._managed)

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


@hookimpl
def llmgw_engines():
    return [TrtllmEngine()]
