"""`llmgw up` (slow): a client asking for more answer tokens than the context leaves is fitted, from the first
request after start (the sim engine's context is 131072; Claude Code and pydantic-ai ask for 32000 or 16384,
and some clients for more than the whole context)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from up_started import up_started

from llmgw.router.fit import FITTED_HEADER


@pytest.mark.slow
def test_under_up_a_max_tokens_past_the_context_is_fitted(tmp_path):
    import openai

    proc = subprocess.Popen(
        [sys.executable, "-m", "llmgw", "up", "--dir", str(tmp_path / "up"), "--port", "0", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        info = up_started(proc)
        client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"], max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=info["model"], messages=[{"role": "user", "content": "Hi"}], max_tokens=200000)
        fitted = int(raw.headers[FITTED_HEADER])
        assert 131000 < fitted < 131072, "lowered to what the 131072-token context leaves after the prompt"
        assert raw.parse().choices[0].message.content
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]
