"""The first-party engines: command lines, keys by environment, screening."""

import pytest

from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import LaunchSpec


@pytest.fixture(scope="module")
def engines():
    return load_plugins(allow=None).engines()


def spec(**kw):
    base = dict(model="qwen", weights="/var/lib/llmgw/weights/qwen", host="127.0.0.1", port=8100,
                api_key="engine-key-123", gpus=(0, 1))
    base.update(kw)
    return LaunchSpec(**base)


@pytest.mark.parametrize("name", ["sim", "llamacpp", "vllm", "sglang", "trtllm"])
def test_the_key_never_appears_on_the_command_line(engines, name):
    plan = engines[name].plan(spec())
    assert "engine-key-123" not in " ".join(plan.argv)
    assert "engine-key-123" in plan.env.values()


@pytest.mark.parametrize("name", ["llamacpp", "vllm", "sglang", "trtllm"])
def test_gpu_engines_see_only_their_cards_in_bus_order(engines, name):
    env = engines[name].plan(spec()).env
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_vllm_tensor_parallel_follows_the_cards(engines):
    argv = list(engines["vllm"].plan(spec(gpus=(0, 1, 2, 3))).argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"


def test_llamacpp_on_cpu_offloads_nothing(engines):
    argv = list(engines["llamacpp"].plan(spec(gpus=(), cores=8)).argv)
    assert argv[argv.index("--n-gpu-layers") + 1] == "0"
    assert argv[argv.index("--threads") + 1] == "8"


@pytest.mark.parametrize("name,flag,why", [
    ("vllm", "--trust-remote-code", "runs code from the model's repository"),
    ("sglang", "--trust-remote-code", "runs code from the model's repository"),
    ("trtllm", "--trust_remote_code", "runs code from the model's repository"),
    ("llamacpp", "--trust-remote-code", "runs code from the model's repository"),
    ("llamacpp", "--slot-save-path", "writes the server's slots to a folder it names"),
    ("llamacpp", "--log-file", "writes the engine's log to a file it names"),
    ("vllm", "--chat-template", "reads a file it names"),
])
def test_flags_that_run_code_or_touch_files_are_refused_with_the_reason(engines, name, flag, why):
    assert engines[name].validate([flag, "/etc/cron.d/x"], {}) == [f"args[0]: {flag} {why}: not allowed"]


@pytest.mark.parametrize("name", ["sim", "llamacpp", "vllm", "sglang", "trtllm"])
def test_a_flag_not_on_the_allow_list_is_refused(engines, name):
    assert engines[name].validate(["--max-num-seqs", "8", "--made-up-flag", "1"], {})[-1] == (
        f"args[2]: --made-up-flag is not on the {name} engine's allow list (docs/engines.md has it): not allowed")


@pytest.mark.parametrize("name", ["sim", "llamacpp", "vllm", "sglang", "trtllm"])
def test_environment_that_loads_code_is_refused(engines, name):
    problems = engines[name].validate([], {"LD_PRELOAD": "/tmp/x.so", "NCCL_NET_PLUGIN": "/tmp/y.so",
                                           "CUDA_INJECTION64_PATH": "/tmp/z.so"})
    assert problems == [
        "env.LD_PRELOAD: LD_PRELOAD changes what the dynamic loader loads: not allowed",
        "env.NCCL_NET_PLUGIN: NCCL_NET_PLUGIN loads a plugin (code) into the engine: not allowed",
        "env.CUDA_INJECTION64_PATH: CUDA_INJECTION64_PATH loads a library into the engine: not allowed",
    ]


@pytest.mark.parametrize("variable,why", [
    ("HF_TOKEN", "is a credential; an engine gets only its own key, from llmgw"),
    ("VLLM_CACHE_ROOT", "names a file or folder the engine would read or write"),
    ("NCCL_DEBUG_FILE", "names a file or folder the engine would read or write"),
    ("PYTHONSTARTUP", "changes what Python imports or runs at start"),
    ("PATH", "changes which programs run"),
    ("CUDA_VISIBLE_DEVICES", "is set by llmgw for each replica; remove it"),
])
def test_variables_naming_files_credentials_or_what_llmgw_sets_are_refused(engines, variable, why):
    [problem] = engines["vllm"].validate([], {variable: "x"})
    assert why in problem and problem.startswith(f"env.{variable}: ")


def test_a_variable_outside_the_engines_families_is_refused(engines):
    assert engines["llamacpp"].validate([], {"VLLM_USE_V1": "1"}) == [
        "env.VLLM_USE_V1: VLLM_USE_V1 is not among the variables the llamacpp engine is tuned with "
        "(CUDA_*, NCCL_*, OMP_*, TZ, GGML_*); not allowed"]


def test_llamacpp_flags_given_as_variables_are_screened_as_flags(engines):
    assert engines["llamacpp"].validate([], {"LLAMA_ARG_CTX_SIZE": "4096"}) == []
    [problem] = engines["llamacpp"].validate([], {"LLAMA_ARG_SLOT_SAVE_PATH": "/tmp"})
    assert "--slot-save-path" in problem and "not allowed" in problem


def test_flags_llmgw_sets_itself_are_refused(engines):
    assert engines["vllm"].validate(["--port=9000"], {}) == ["args[0]: --port is set by llmgw for each replica; "
                                                            "remove it"]


def test_a_stray_value_and_a_missing_one_are_named(engines):
    assert engines["llamacpp"].validate(["4096", "--ctx-size"], {}) == [
        "args[0]: '4096' is not a flag, nor the value of the flag before it; write flags as --name value or "
        "--name=value",
        "args[1]: --ctx-size takes a value, and none follows it"]
    assert engines["llamacpp"].validate(["--jinja=yes"], {}) == ["args[0]: --jinja takes no value; write it alone"]


def test_ordinary_tuning_passes(engines):
    assert engines["vllm"].validate(["--max-num-seqs", "128", "--gpu-memory-utilization=0.85"],
                                    {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "NCCL_DEBUG": "INFO"}) == []
    assert engines["llamacpp"].validate(["--ctx-size", "4096", "--seed", "-1", "--jinja", "-fa", "on", "--load-mode", "mmap"],
                                        {"GGML_SCHED_MAX_COPIES": "1", "OMP_NUM_THREADS": "4"}) == []
    assert engines["sim"].validate(["--ttft", "0.5", "--no-enable-prefix-caching"], {}) == []


def test_an_engine_declaring_no_allow_list_takes_no_args_or_env():
    from llmgw.plugins.types import Engine, LaunchPlan

    class Bare(Engine):
        name = "bare"

        def plan(self, spec):
            return LaunchPlan(argv=["true"], env={})

    assert Bare().validate([], {}) == []
    assert Bare().validate(["--x"], {"Y": "1"}) == [
        "args[0]: the bare engine allows no profile args or env; remove it",
        "env.Y: the bare engine allows no profile args or env; remove it"]


def test_docs_engines_md_shows_every_allow_list_as_the_plugins_declare_it(engines):
    from pathlib import Path

    from llmgw.plugins.engine_args import allow_lists_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "engines.md").read_text()
    start = doc.index("<!-- allow-lists:")
    shown = doc[doc.index("\n", start) + 1:doc.index("<!-- /allow-lists -->")]
    assert shown == allow_lists_markdown(engines), "regenerate the block with allow_lists_markdown"
