"""The `llamacpp` engine: llama.cpp's llama-server, on GPUs or CPU only."""

from __future__ import annotations

import subprocess

from llmgw.plugins import hookimpl
from llmgw.plugins.engine_support import COMMON_ENV, GPU_ENV, ArgPolicy, flag_table, gpu_env
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec


class LlamaCppEngine(Engine):
    name = "llamacpp"
    description = "llama.cpp's llama-server: GGUF models on GPUs or CPU"
    devices = ("cpu", "gpu")
    adapter_loading = "start"  # adapters: see plan()
    metrics = {
        "llamacpp:requests_processing": "running",
        "llamacpp:requests_deferred": "waiting",
        "llamacpp:kv_cache_usage_ratio": "kv_cache_usage",
    }
    arguments = ArgPolicy(
        engine="llamacpp",
        flags=flag_table(
            # context, batching and threads
            "-c= --ctx-size= -b= --batch-size= -ub= --ubatch-size= -np= --parallel= -t= --threads= "
            "-tb= --threads-batch= -cb --cont-batching -nocb --no-cont-batching --keep= -n= --n-predict= "
            "--predict= --cache-reuse= -kvu --kv-unified --swa-full --ctx-checkpoints= --swa-checkpoints= "
            "-to= --timeout= --threads-http= --prio= --poll= --numa= -C= --cpu-mask= --cpu-range= "
            # memory and devices
            "-lm= --load-mode= -ngl= --n-gpu-layers= --gpu-layers= -sm= --split-mode= -ts= --tensor-split= "
            "-mg= --main-gpu= -dev= --device= -ot= --override-tensor= -cmoe --cpu-moe -ncmoe= --n-cpu-moe= "
            "-nkvo --no-kv-offload -ctk= --cache-type-k= -ctv= --cache-type-v= -fa= --flash-attn= "
            "-dt= --defrag-thold= --no-op-offload --no-repack "
            # RoPE and context extension
            "--rope-scaling= --rope-scale= --rope-freq-base= --rope-freq-scale= --yarn-orig-ctx= "
            "--yarn-ext-factor= --yarn-attn-factor= --yarn-beta-slow= --yarn-beta-fast= "
            # sampling defaults
            "-s= --seed= --temp= --top-k= --top-p= --min-p= --typical= --repeat-last-n= --repeat-penalty= "
            "--presence-penalty= --frequency-penalty= --mirostat= --mirostat-lr= --mirostat-ent= "
            "--dry-multiplier= --dry-base= --dry-allowed-length= --dry-penalty-last-n= --samplers= "
            "--sampling-seq= --ignore-eos --top-nsigma= --xtc-probability= --xtc-threshold= "
            # chat and serving
            "--jinja --chat-template= -r= --reverse-prompt= --reasoning-format= --reasoning-budget= --no-prefill-assistant "
            "--embedding --embeddings --rerank --reranking --pooling= --slots --no-slots --props "
            "--slot-prompt-similarity= -sps= --no-webui --draft-p-min= "
            # its own log, on stderr
            "-v --verbose --log-verbose -lv= --verbosity= --log-verbosity= --log-colors= --log-prefix "
            "--log-timestamps --log-disable"
        ),
        managed=("-m", "--model", "--host", "--port", "--api-key", "--api-key-file", "-a", "--alias", "--metrics"),
        refused={
            "--slot-save-path": "writes the server's slots to a folder it names",
            "--log-file": "writes the engine's log to a file it names",
            "-lf": "writes the engine's log to a file it names",
            "--path": "serves the files of a folder it names",
            "--chat-template-file": "reads a file it names",
            "--grammar-file": "reads a file it names",
            "--json-schema-file": "reads a file it names",
            "-jf": "reads a file it names",
            "--lora": "loads an adapter from a file it names",
            "--lora-scaled": "loads an adapter from a file it names",
            "--lora-init-without-apply": "lets clients load adapters",
            "--control-vector": "reads a file it names",
            "--control-vector-scaled": "reads a file it names",
            "-md": "loads a second model from a file it names",
            "--model-draft": "loads a second model from a file it names",
            "--mmproj": "loads a file it names",
            "-mm": "loads a file it names",
            "--mmproj-url": "downloads a file from the Internet",
            "-mmu": "downloads a file from the Internet",
            "-hf": "downloads a model from Hugging Face",
            "-hfr": "downloads a model from Hugging Face",
            "--hf-repo": "downloads a model from Hugging Face",
            "-hff": "downloads a model from Hugging Face",
            "--hf-file": "downloads a model from Hugging Face",
            "-hft": "is a Hugging Face credential",
            "--hf-token": "is a Hugging Face credential",
            "-mu": "downloads a model from the Internet",
            "--model-url": "downloads a model from the Internet",
            "--ssl-key-file": "reads a key from a file it names",
            "--ssl-cert-file": "reads a certificate from a file it names",
            "--rpc": "sends the model's work to other machines",
            "--media-path": "lets requests read files from a folder it names",
            "-f": "reads a file it names",
            "--file": "reads a file it names",
            "--system-prompt-file": "reads a file it names",
            "--prompt-cache": "writes a file it names",
        },
        env=(*COMMON_ENV, "GGML_*"),
        env_managed=(*GPU_ENV, "LLAMA_API_KEY"),
        env_flags_prefix="LLAMA_ARG_",
    )

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
        # adapters: each loaded at start at scale 0, so a request for the base model gets none; one for an
        # adapter carries "lora": [{"id": its index, "scale": ...}] (llmgw.adapters.serving). Not
        # --lora-init-without-apply: that leaves every scale at 1 for requests that name none.
        for adapter in spec.adapters:
            argv += ["--lora-scaled", f"{adapter.path}:0"]
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
