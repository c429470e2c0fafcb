"""`llmgw sim-engine` on the command line, and its page in docs/."""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import sys
import urllib.request

import attrs
import pytest

from llmgw.cli.main import UsageError, build_parser
from llmgw.cli.sim_engine_cmd import options_from_args
from llmgw.simengine import SimOptions

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "sim-engine.md"


def parse(*argv):
    return options_from_args(build_parser().parse_args(["sim-engine", *argv]))


def test_flags_become_options(monkeypatch):
    for name in ("LLMGW_ENGINE_API_KEY", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    options = parse("--model", "a", "--served-model-name", "b", "--port", "0", "--ttft", "0.5",
                    "--max-num-seqs", "3", "--no-enable-prefix-caching", "--max-model-len", "99")
    assert options.models == ("a", "b")
    assert (options.port, options.ttft, options.max_num_seqs) == (0, 0.5, 3)
    assert options.prefix_caching is False and options.context_length == 99
    assert options.api_key is None
    assert parse("--model", "a").block_size == SimOptions().block_size


def test_the_key_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("LLMGW_ENGINE_API_KEY", raising=False)
    monkeypatch.setenv("VLLM_API_KEY", "from-vllm")
    assert parse("--model", "a").api_key == "from-vllm"
    monkeypatch.setenv("LLMGW_ENGINE_API_KEY", "ours")
    assert parse("--model", "a").api_key == "ours"
    assert parse("--model", "a", "--api-key", "flag").api_key == "flag"


def test_listen_sets_host_and_port():
    options = parse("--model", "a", "--listen", "0.0.0.0:9001")
    assert (options.host, options.port) == ("0.0.0.0", 9001)
    assert parse("--model", "a", "--listen", "[::1]:0").host == "::1"
    with pytest.raises(UsageError):
        parse("--model", "a", "--listen", "nowhere")


def test_bad_values_are_usage_errors():
    with pytest.raises(UsageError, match="--fail-rate"):
        parse("--model", "a", "--fail-rate", "3")


def test_a_model_is_required(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["sim-engine"])
    assert exit_.value.code == 2


async def test_the_command_prints_its_address_serves_and_exits_0_on_sigterm():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llmgw.cli.main", "sim-engine", "--model", "cli-model", "--port", "0",
        "--ttft", "0", "--tpot", "0", stdout=asyncio.subprocess.PIPE)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.removeprefix("listening on ")

        def get():
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                return json.load(r)

        assert (await asyncio.to_thread(get))["data"][0]["id"] == "cli-model"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_every_flag_is_in_the_docs():
    text = DOC.read_text()
    for field in attrs.fields(SimOptions):
        assert f"`{field.metadata['flag']}" in text, field.metadata["flag"]
    for extra in ("--listen", "--served-model-name", "--max-model-len"):
        assert extra in text
