"""The `sglang` engine: SGLang's server, one or more GPUs."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import COMMON_ENV, GPU_ENV, ArgPolicy, flag_table, gpu_env, parallel_sizes
from llmgw.plugins.engine_versions import dist_version
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class SglangEngine(Engine):
    name = "sglang"
    description = "SGLang's server (python -m sglang.launch_server)"
    devices = ("gpu",)
    multi_node = True
    metrics = {
        "sglang:num_running_reqs": "running",
        "sglang:num_queue_reqs": "waiting",
        "sglang:token_usage": "kv_cache_usage",
        "sglang:cache_hit_rate": "prefix_cache_hit_rate",
    }
    arguments = ArgPolicy(
        engine="sglang",
        flags=flag_table(
            "--dtype= --context-length= --mem-fraction-static= --max-running-requests= --max-total-tokens= "
            "--chunked-prefill-size= --max-prefill-tokens= --schedule-policy= --schedule-conservativeness= "
            "--quantization= --kv-cache-dtype= --attention-backend= --sampling-backend= --disable-radix-cache "
            "--enable-torch-compile --torch-compile-max-bs= --cuda-graph-max-bs= --disable-cuda-graph "
            "--random-seed= --dp-size= --dp= --ep-size= --enable-dp-attention --tool-call-parser= "
            "--reasoning-parser= --log-level= --stream-interval= --grammar-backend= --tokenizer-mode= "
            "--watchdog-timeout= --speculative-algorithm= --speculative-num-steps= --speculative-eagle-topk= "
            "--speculative-num-draft-tokens= --page-size= --disable-overlap-schedule --enable-mixed-chunk "
            "--num-continuous-decode-steps= --max-queued-requests= --enable-cache-report --show-time-cost "
            "--decode-log-interval= --pp-size= --moe-runner-backend= --enable-hierarchical-cache"
        ),
        managed=("--model-path", "--model", "--host", "--port", "--api-key", "--served-model-name", "--tp-size",
                 "--tp"),
        refused={
            "--trust-remote-code": "runs code from the model's repository",
            "--download-dir": "writes downloads to a folder it names",
            "--chat-template": "reads a file it names",
            "--ssl-keyfile": "reads a key from a file it names",
            "--ssl-certfile": "reads a certificate from a file it names",
            "--enable-custom-logit-processor": "lets requests send code to run",
            "--custom-weight-loader": "imports code it names",
            "--tokenizer-path": "reads a tokenizer from somewhere other than the model's files",
            "--speculative-draft-model-path": "loads a second model from where it names",
            "--lora-paths": "loads adapters from where it names",
            "--enable-lora": "lets clients load adapters",
            "--log-requests": "writes prompts and answers into the engine's log",
            "--crash-dump-folder": "writes requests to a folder it names",
            "--enable-metrics-for-all-schedulers": "is set by llmgw",
            "--dist-init-addr": "joins processes at an address it names",
            "--load-format": "chooses a loader that can run code",
            "--json-model-override-args": "overrides the model's own description of itself",
        },
        env=(*COMMON_ENV, "SGLANG_*", "SGL_*", "TORCH_*", "PYTORCH_*", "HF_*", "TOKENIZERS_*", "TRANSFORMERS_*",
             "TRITON_*", "FLASHINFER_*"),
        env_managed=(*GPU_ENV, "LLMGW_ENGINE_API_KEY", "HF_HUB_OFFLINE"),
    )

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        python = spec.binary or "python3"
        tp, pp = parallel_sizes(spec)
        argv = [
            python, "-m", "sglang.launch_server",
            "--model-path", spec.weights,
            "--served-model-name", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tp-size", str(tp),
            "--enable-metrics",
        ]
        if pp > 1:
            argv += ["--pp-size", str(pp)]
        worker = spec.nnodes > 1 and spec.node_rank > 0
        if spec.nnodes > 1:
            # Every rank runs launch_server; rank 0 serves the API, the others meet it at --dist-init-addr.
            argv += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank),
                     "--dist-init-addr", f"{spec.head_address}:{spec.dist_port}"]
        if spec.context_length:
            argv += ["--context-length", str(spec.context_length)]
        argv += list(spec.args)
        # SGLang takes its key only as a flag; the argv of a root process is
        # readable by local users, so it goes through the environment instead
        # and the agent's launcher expands it (see llmgw.agent).
        env = {**spec.env, **gpu_env(spec), "HF_HUB_OFFLINE": "1"}
        if worker:  # serves no HTTP: no key, and it is up while it runs
            return LaunchPlan(argv=argv, env=env, ready_path="", metrics_path=None)
        argv += ["--api-key", "${LLMGW_ENGINE_API_KEY}"]
        env["LLMGW_ENGINE_API_KEY"] = spec.api_key
        return LaunchPlan(argv=argv, env=env, ready_path="/health")

    def version(self, binary=None):
        # Read from the environment's package metadata: importing the engine takes seconds and a GPU.
        return dist_version(binary, "sglang")


@hookimpl
def llmgw_engines():
    return [SglangEngine()]
