"""The `sglang` engine: SGLang's server, one or more GPUs."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import gpu_env, screen
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class SglangEngine(Engine):
    name = "sglang"
    description = "SGLang's server (python -m sglang.launch_server)"
    devices = ("gpu",)
    metrics = {
        "sglang:num_running_reqs": "running",
        "sglang:num_queue_reqs": "waiting",
        "sglang:token_usage": "kv_cache_usage",
        "sglang:cache_hit_rate": "prefix_cache_hit_rate",
    }
    _managed = ("--model-path", "--model", "--host", "--port", "--api-key", "--served-model-name", "--tp-size", "--tp")
    _denied = ("--trust-remote-code", "--download-dir", "--chat-template", "--ssl-keyfile", "--ssl-certfile",
               "--enable-custom-logit-processor", "--custom-weight-loader")

    def validate(self, args, env):
        return screen(args, env, denied_flags=self._denied, managed_flags=self._managed)

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        python = spec.binary or "python3"
        argv = [
            python, "-m", "sglang.launch_server",
            "--model-path", spec.weights,
            "--served-model-name", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tp-size", str(max(1, len(spec.gpus))),
            "--enable-metrics",
        ]
        if spec.context_length:
            argv += ["--context-length", str(spec.context_length)]
        argv += list(spec.args)
        # SGLang takes its key only as a flag; the argv of a root process is
        # readable by local users, so it goes through the environment instead
        # and the agent's launcher expands it (see llmgw.agent).
        argv += ["--api-key", "${LLMGW_ENGINE_API_KEY}"]
        env = {**spec.env, **gpu_env(spec), "LLMGW_ENGINE_API_KEY": spec.api_key, "HF_HUB_OFFLINE": "1"}
        return LaunchPlan(argv=argv, env=env, ready_path="/health")


@hookimpl
def llmgw_engines():
    return [SglangEngine()]
