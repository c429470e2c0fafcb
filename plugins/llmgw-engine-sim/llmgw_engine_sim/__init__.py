"""The `sim` engine: llmgw's own simulated OpenAI-compatible server."""

from __future__ import annotations

from llmgw.buildinfo import self_command
from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import ArgPolicy, flag_table
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class SimEngine(Engine):
    name = "sim"
    description = "simulated engine (llmgw sim-engine): OpenAI API, vLLM metrics, no GPU needed"
    devices = ("cpu", "gpu")
    adapter_loading = "runtime"  # adapters: see plan()
    metrics = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        "vllm:prefix_cache_queries_total": "prefix_cache_queries",
        "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    }
    arguments = ArgPolicy(
        engine="sim",
        flags=flag_table(
            "--seed= --ttft= --prefill-per-token= --tpot= --max-tokens-default= --max-num-seqs= --block-size= "
            "--kv-cache-blocks= --no-enable-prefix-caching --embedding-dim= --context-length= --max-model-len= "
            "--fail-rate= --task= --answer-tokens= --answer-prefix="
        ),
        managed=("--host", "--port", "--listen", "--model", "--served-model-name", "--api-key",
                 "--lora-modules", "--max-loras"),  # adapters: from the model's adapters
        env=("TZ",),
        env_managed=("LLMGW_ENGINE_API_KEY", "VLLM_API_KEY"),
    )

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        argv = [*self_command(), "sim-engine", "--model", spec.model, "--host", spec.host, "--port", str(spec.port)]
        if spec.context_length:
            argv += ["--context-length", str(spec.context_length)]
        if spec.adapters:  # adapters: as vLLM: all at start, or room for max_adapters loaded on demand
            argv += ["--max-loras", str(spec.max_adapters if spec.max_adapters > 0 else len(spec.adapters))]
            if spec.max_adapters <= 0:
                for adapter in spec.adapters:
                    argv += ["--lora-modules", f"{adapter.name}={adapter.path}"]
        argv += list(spec.args)
        env = {**spec.env, "LLMGW_ENGINE_API_KEY": spec.api_key}
        return LaunchPlan(argv=argv, env=env)

    def version(self, binary=None):
        from llmgw import __version__

        return __version__


@hookimpl
def llmgw_engines():
    return [SimEngine()]
