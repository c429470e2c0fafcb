"""Real clients in their own processes against the gateway and the sim engine: LangChain's ChatOpenAI and
ChatAnthropic and LiteLLM (Python), the openai npm package (Node), Claude Code (`claude -p`) and Codex
CLI (`codex exec`). Each makes a plain call, a stream and a tool call where it has one; Claude Code and
Codex must exit 0. Every answer an OpenAI endpoint gave is checked against OpenAI's document.

Slow: the clients are installed into the suite's cache (tests/clients/environments.py) on first use,
from PyPI and npm.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil

import pytest

from . import environments

pytestmark = pytest.mark.slow

SCRIPTS = pathlib.Path(__file__).with_name("scripts")
#: Claude Code's own instructions and tools take some 20,000 tokens: the sim gets a context that holds them.
LONG_CONTEXT = 262144


async def _run(argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
               timeout: float = 240) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        return 124, out.decode(errors="replace"), err.decode(errors="replace")
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _clean_env(home: pathlib.Path, **extra: str) -> dict[str, str]:
    """A client's environment: its own HOME, no proxies or keys of the machine's."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def python_clients() -> pathlib.Path:
    return environments.python_env()


@pytest.fixture(scope="module")
def node_clients() -> pathlib.Path:
    if shutil.which("node") is None:
        pytest.fail("node is not installed: apt-get install nodejs npm (.ci/run installs it)")
    return environments.node_dir()


async def test_langchain_and_litellm(served, python_clients, tmp_path):
    s = await served()
    code, out, err = await _run([str(python_clients), str(SCRIPTS / "python_clients.py"), s.url, "sim"],
                                env=_clean_env(tmp_path))
    assert code == 0, out + err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    for name in ("langchain_openai", "langchain_anthropic", "litellm"):
        assert got[name]["plain"] and got[name]["stream"], (name, got[name])
        assert got[name]["tool"] == ["weather"], (name, got[name])
    assert got["langchain_openai"]["tool_id"].startswith("call_")
    assert got["langchain_anthropic"]["tool_id"].startswith("toolu_")
    assert got["litellm"]["anthropic"]
    s.check()


async def test_the_openai_npm_package_on_node(served, node_clients, tmp_path):
    s = await served()
    env = _clean_env(tmp_path, NODE_PATH=str(node_clients / "node_modules"))
    script = node_clients / "node_openai.mjs"  # beside node_modules: ES modules resolve packages from there
    shutil.copy(SCRIPTS / "node_openai.mjs", script)
    code, out, err = await _run(["node", str(script), s.url, "sim"], env=env)
    assert code == 0, out + err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["plain"] and got["stream"] and got["responses"]
    assert got["tool"] == ["get_weather"] and got["tool_id"].startswith("call_")
    s.check()


async def test_claude_code_answers_and_exits_0(served, node_clients, tmp_path):
    s = await served(context_length=LONG_CONTEXT, answer_tokens=48)
    claude = node_clients / "node_modules" / ".bin" / "claude"
    env = _clean_env(tmp_path, ANTHROPIC_BASE_URL=s.url, ANTHROPIC_API_KEY="none", ANTHROPIC_MODEL="sim",
                     ANTHROPIC_SMALL_FAST_MODEL="sim", ANTHROPIC_DEFAULT_HAIKU_MODEL="sim",
                     ANTHROPIC_DEFAULT_SONNET_MODEL="sim", ANTHROPIC_DEFAULT_OPUS_MODEL="sim",
                     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
                     DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_USE_BEDROCK="0")
    work = tmp_path / "project"
    work.mkdir()
    code, out, err = await _run([str(claude), "-p", "Say hello.", "--output-format", "json"], env=env, cwd=str(work))
    assert code == 0, (out + err)[-4000:]
    result = json.loads(out)
    assert result.get("is_error") is False and result.get("result"), result
    streamed_code, streamed, err = await _run(
        [str(claude), "-p", "Say hello.", "--output-format", "stream-json", "--verbose"], env=env, cwd=str(work))
    assert streamed_code == 0, (streamed + err)[-4000:]
    paths = {e.path for e in s.proxy.exchanges}
    assert "/v1/messages" in paths
    assert all(e.status < 500 for e in s.proxy.exchanges), [(e.path, e.status) for e in s.proxy.exchanges]
    s.check()


async def test_codex_exec_answers_and_exits_0(served, node_clients, tmp_path):
    s = await served(context_length=LONG_CONTEXT, answer_tokens=48)
    codex = node_clients / "node_modules" / ".bin" / "codex"
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "sim"\nmodel_provider = "llmgw"\n\n[model_providers.llmgw]\nname = "llmgw"\n'
        f'base_url = "{s.base_url}"\nenv_key = "LLMGW_API_KEY"\nwire_api = "responses"\n')
    env = _clean_env(tmp_path, CODEX_HOME=str(home), LLMGW_API_KEY="none")
    work = tmp_path / "project"
    work.mkdir()
    code, out, err = await _run([str(codex), "exec", "--skip-git-repo-check", "Say hello."], env=env,
                                cwd=str(work))
    assert code == 0, (out + err)[-4000:]
    assert "/v1/responses" in {e.path for e in s.proxy.exchanges}
    assert all(e.status < 500 for e in s.proxy.exchanges), [(e.path, e.status) for e in s.proxy.exchanges]
    s.check()


def test_claude_code_and_codex_exec_complete_against_llmgw_up(node_clients, tmp_path):
    """The README's first command, then Claude Code and Codex CLI pointed at what it printed: both exit 0 (the sim
    model's 131072-token context holds Claude Code's instructions; its max_tokens of 32000 is fitted)."""
    import signal
    import subprocess
    import sys

    from up_started import up_started

    proc = subprocess.Popen(
        [sys.executable, "-m", "llmgw", "up", "--dir", str(tmp_path / "up"), "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        info = up_started(proc)
        base, key, model = info["base_url"], info["api_key"], info["model"]
        root = base.removesuffix("/v1")
        work = tmp_path / "project"
        work.mkdir()
        claude = node_clients / "node_modules" / ".bin" / "claude"
        env = _clean_env(tmp_path / "claude-home", ANTHROPIC_BASE_URL=root, ANTHROPIC_API_KEY=key,
                         ANTHROPIC_MODEL=model, ANTHROPIC_SMALL_FAST_MODEL=model,
                         ANTHROPIC_DEFAULT_HAIKU_MODEL=model, ANTHROPIC_DEFAULT_SONNET_MODEL=model,
                         ANTHROPIC_DEFAULT_OPUS_MODEL=model, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                         DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1")
        (tmp_path / "claude-home").mkdir()
        code, out, err = asyncio.run(_run([str(claude), "-p", "Say hello.", "--output-format", "json"], env=env,
                                          cwd=str(work)))
        assert code == 0, (out + err)[-4000:]
        assert json.loads(out).get("is_error") is False
        codex = node_clients / "node_modules" / ".bin" / "codex"
        home = tmp_path / "codex-home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'model = "{model}"\nmodel_provider = "llmgw"\n\n[model_providers.llmgw]\nname = "llmgw"\n'
            f'base_url = "{base}"\nenv_key = "LLMGW_API_KEY"\nwire_api = "responses"\n')
        env = _clean_env(tmp_path, CODEX_HOME=str(home), LLMGW_API_KEY=key)
        code, out, err = asyncio.run(_run([str(codex), "exec", "--skip-git-repo-check", "Say hello."], env=env,
                                          cwd=str(work)))
        assert code == 0, (out + err)[-4000:]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]
