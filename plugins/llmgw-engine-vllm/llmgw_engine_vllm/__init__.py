"""The `vllm` engine: vLLM's OpenAI-compatible server, one or more GPUs."""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import COMMON_ENV, GPU_ENV, ArgPolicy, flag_table, gpu_env, parallel_sizes
from llmgw.plugins.engine_versions import dist_version
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class VllmEngine(Engine):
    name = "vllm"
    description = "vLLM's OpenAI-compatible server (python -m vllm.entrypoints.openai.api_server)"
    devices = ("gpu",)
    multi_node = True
    adapter_loading = "runtime"  # adapters: see plan()
    metrics = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        "vllm:gpu_cache_usage_perc": "kv_cache_usage",
        "vllm:prefix_cache_queries_total": "prefix_cache_queries",
        "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    }
    arguments = ArgPolicy(
        engine="vllm",
        flags=flag_table(
            "--dtype= --max-model-len= --gpu-memory-utilization= --max-num-seqs= --max-num-batched-tokens= "
            "--enable-prefix-caching --no-enable-prefix-caching --enable-chunked-prefill --no-enable-chunked-prefill "
            "--quantization= -q= --kv-cache-dtype= --block-size= --swap-space= --cpu-offload-gb= --enforce-eager "
            "--seed= --tokenizer-mode= --enable-auto-tool-choice --tool-call-parser= --reasoning-parser= "
            "--max-logprobs= --disable-log-stats --disable-log-requests --enable-log-requests "
            "--pipeline-parallel-size= -pp= --data-parallel-size= -dp= --enable-expert-parallel "
            "--max-seq-len-to-capture= --max-num-partial-prefills= --long-prefill-token-threshold= "
            "--scheduling-policy= --async-scheduling --limit-mm-per-prompt= --mm-processor-kwargs= "
            "--rope-scaling= --rope-theta= --override-generation-config= --compilation-config= -O= "
            "--uvicorn-log-level= --disable-custom-all-reduce --distributed-executor-backend= "
            "--calculate-kv-scales --max-parallel-loading-workers= --disable-sliding-window --max-long-partial-prefills= "
            "--enable-sleep-mode --num-scheduler-steps= --guided-decoding-backend= --structured-outputs-config= "
            "--disable-fastapi-docs --enable-prompt-tokens-details --enable-force-include-usage "
            "--max-lora-rank= --max-cpu-loras= --lora-dtype= --fully-sharded-loras "  # adapters: their sizes
            "--return-tokens-as-token-ids --max-cudagraph-capture-size= --cuda-graph-sizes="
        ),
        managed=("--model", "--host", "--port", "--api-key", "--served-model-name", "--tensor-parallel-size", "-tp"),
        refused={
            "--trust-remote-code": "runs code from the model's repository",
            "--download-dir": "writes downloads to a folder it names",
            "--ssl-keyfile": "reads a key from a file it names",
            "--ssl-certfile": "reads a certificate from a file it names",
            "--ssl-ca-certs": "reads a file it names",
            "--middleware": "imports code it names",
            "--chat-template": "reads a file it names",
            "--tool-parser-plugin": "imports code from a file it names",
            "--logits-processor-pattern": "lets requests name code to import",
            "--logits-processors": "imports code it names",
            "--worker-extension-cls": "imports code it names",
            "--worker-cls": "imports code it names",
            "--allowed-local-media-path": "lets requests read files from a folder it names",
            "--response-role": "changes the role llmgw's router expects",
            "--tokenizer": "reads a tokenizer from somewhere other than the model's files",
            "--hf-token": "is a Hugging Face credential",
            "--speculative-config": "loads a second model from where it names",
            "--kv-transfer-config": "sends the KV cache to other machines",
            "--generation-config": "reads a folder it names",
            "--lora-modules": "loads adapters from where it names",
            "--enable-lora": "lets clients load adapters",
            "--otlp-traces-endpoint": "sends traces, which hold prompts, to an address it names",
            "--collect-detailed-traces": "records prompts",
            "--api-server-count": "starts servers llmgw does not watch",
            "--headless": "runs without the API llmgw talks to",
            "--load-format": "chooses a loader that can run code (tensorizer, runai)",
            "--model-loader-extra-config": "configures a loader that reads where it names",
        },
        env=(*COMMON_ENV, "VLLM_*", "TORCH_*", "PYTORCH_*", "HF_*", "TOKENIZERS_*", "TRANSFORMERS_*",
             "TRITON_*", "FLASHINFER_*", "MKL_*"),
        env_managed=(*GPU_ENV, "VLLM_API_KEY", "VLLM_NO_USAGE_STATS", "HF_HUB_OFFLINE",
                     "VLLM_ALLOW_RUNTIME_LORA_UPDATING"),  # adapters: set from max_adapters
    )

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        python = spec.binary or "python3"
        tp, pp = parallel_sizes(spec)
        argv = [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", spec.weights,
            "--served-model-name", spec.model,
            "--host", spec.host,
            "--port", str(spec.port),
            "--tensor-parallel-size", str(tp),
        ]
        if pp > 1:
            argv += ["--pipeline-parallel-size", str(pp)]
        worker = spec.nnodes > 1 and spec.node_rank > 0
        if spec.nnodes > 1:
            # vLLM's own multiprocessing backend over nodes: every rank runs this server; rank 0 serves
            # the API and the others join it headless at --master-addr:--master-port.
            argv += ["--distributed-executor-backend", "mp", "--nnodes", str(spec.nnodes),
                     "--node-rank", str(spec.node_rank), "--master-addr", spec.head_address,
                     "--master-port", str(spec.dist_port)]
            if worker:
                argv.append("--headless")
        if spec.context_length:
            argv += ["--max-model-len", str(spec.context_length)]
        argv += adapter_args(spec)
        argv += list(spec.args)
        env = {**spec.env, **gpu_env(spec), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        if spec.adapters and spec.max_adapters > 0:  # adapters: loaded on demand by /v1/load_lora_adapter
            env[RUNTIME_LORA_ENV] = "True"
        if worker:  # serves no HTTP: no key, and it is up while it runs
            return LaunchPlan(argv=argv, env=env, ready_path="", metrics_path=None)
        env["VLLM_API_KEY"] = spec.api_key
        return LaunchPlan(argv=argv, env=env, ready_path="/health")

    def version(self, binary=None):
        # Read from the environment's package metadata: importing the engine takes seconds and a GPU.
        return dist_version(binary, "vllm")


#: adapters: what lets vLLM load and unload adapters while it runs (POST /v1/load_lora_adapter)
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def adapter_args(spec: LaunchSpec) -> list[str]:
    """adapters: --enable-lora with room for max_adapters; with max_adapters 0, every adapter loaded at start."""
    if not spec.adapters:
        return []
    args = ["--enable-lora", "--max-loras", str(spec.max_adapters if spec.max_adapters > 0 else len(spec.adapters))]
    if spec.max_adapters <= 0:
        args += ["--lora-modules", *(f"{a.name}={a.path}" for a in spec.adapters)]
    return args


@hookimpl
def llmgw_engines():
    return [VllmEngine()]
