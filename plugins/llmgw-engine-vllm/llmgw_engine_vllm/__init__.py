"""The `vllm` engine: vLLM's OpenAI-compatible server, one or more GPUs."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import gpu_env, screen
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class VllmEngine(Engine):
    name = "vllm"
    description = "vLLM's OpenAI-compatible server (python -m vllm.entrypoints.openai.api_server)"
    devices = ("gpu",)
    metrics = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        "vllm:gpu_cache_usage_perc": "kv_cache_usage",
        "vllm:prefix_cache_queries_total": "prefix_cache_queries",
        "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    }
    _managed = ("--model", "--host", "--port", "--api-key", "--served-model-name", "--tensor-parallel-size", "-tp")
    # Each of these loads code from the model's repository or writes where it is told.
    _denied = ("--trust-remote-code", "--download-dir", "--ssl-keyfile", "--ssl-certfile", "--middleware",
               "--chat-template", "--tool-parser-plugin", "--logits-processor-pattern", "--worker-extension-cls",
               "--allowed-local-media-path", "--response-role")
    _denied_env = ("VLLM_PLUGINS", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_RPC_BASE_PATH", "VLLM_CONFIG_ROOT",
                   "VLLM_CACHE_ROOT")

    def validate(self, args, env):
        return screen(args, env, denied_flags=self._denied, managed_flags=self._managed, denied_env=self._denied_env)

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        python = spec.binary or "python3"
        argv = [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", spec.weights,
            "--served-model-name", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tensor-parallel-size", str(max(1, len(spec.gpus))),
        ]
        if spec.context_length:
            argv += ["--max-model-len", str(spec.context_length)]
        argv += list(spec.args)
        env = {**spec.env, **gpu_env(spec), "VLLM_API_KEY": spec.api_key, "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        return LaunchPlan(argv=argv, env=env, ready_path="/health")


@hookimpl
def llmgw_engines():
    return [VllmEngine()]
