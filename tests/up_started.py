"""What `llmgw up --json` says once its model answers, read from the process a test started."""

from __future__ import annotations

import json
import subprocess


def up_started(proc: subprocess.Popen) -> dict:
    """Its first stdout line (text mode), parsed: base_url, api_key, model, admin_url…; when it ends having
    printed nothing, an AssertionError holding the end of its stderr."""
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        raise AssertionError(f"llmgw up printed nothing; stderr:\n{proc.stderr.read()[-4000:]}")
    return json.loads(line)
