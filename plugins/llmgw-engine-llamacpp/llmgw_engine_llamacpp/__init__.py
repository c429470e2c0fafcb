"""The `llamacpp` engine: llama.cpp's llama-server, on GPUs or CPU only."""

from __future__ import annotations

import subprocess

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import gpu_env, screen
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class LlamaCppEngine(Engine):
    name = "llamacpp"
    description = "llama.cpp's llama-server: GGUF models on GPUs or CPU"
    devices = ("cpu", "gpu")
    metrics = {
        "llamacpp:requests_processing": "running",
        "llamacpp:requests_deferred": "waiting",
        "llamacpp:kv_cache_usage_ratio": "kv_cache_usage",
    }
    _managed = ("-m", "--model", "--host", "--port", "--api-key", "--api-key-file", "-a", "--alias")
    # Flags that make the server load or write files it was not given.
    _denied = ("--slot-save-path", "--lora-init-without-apply", "--path", "--log-file", "-lf",
               "--chat-template-file", "--grammar-file", "--mmproj-url", "-hf", "--hf-repo", "-mu", "--model-url")

    def validate(self, args, env):
        return screen(args, env, denied_flags=self._denied, managed_flags=self._managed)

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        argv = [
            spec.binary or "llama-server",
            "--model", spec.weights,
            "--alias", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--metrics",
            "--n-gpu-layers", "999" if spec.gpus else "0",
        ]
        if spec.cores:
            argv += ["--threads", str(spec.cores)]
        if spec.context_length:
            argv += ["--ctx-size", str(spec.context_length)]
        argv += list(spec.args)
        # llama-server reads its key from LLAMA_API_KEY: never on the command line.
        env = {**spec.env, **gpu_env(spec), "LLAMA_API_KEY": spec.api_key}
        return LaunchPlan(argv=argv, env=env, ready_path="/health")

    def version(self, binary=None):
        try:
            out = subprocess.run([binary or "llama-server", "--version"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("version:"):
                return line.split(":", 1)[1].strip()
        return None


@hookimpl
def llmgw_engines():
    return [LlamaCppEngine()]
