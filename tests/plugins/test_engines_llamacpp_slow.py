"""The llamacpp allow list against a real llama-server: every flag it allows is one llama-server has."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from llmgw.plugins.manager import load_plugins

pytestmark = pytest.mark.slow


def test_every_allowed_and_managed_llamacpp_flag_is_in_llama_servers_help():
    from llmgw.agent.llamacpp_build import find_cached

    binary = os.environ.get("LLMGW_LLAMA_SERVER") or find_cached()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("no llama-server in the build cache: python -m llmgw.agent.llamacpp_build --pypi")
        pytest.skip("no llama-server in the build cache")
    out = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    known = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", out.stdout + out.stderr))
    policy = load_plugins(allow=None).engines()["llamacpp"].arguments
    missing = sorted(f for f in [*policy.flags, *policy.managed] if f not in known)
    assert missing == [], f"not flags of this llama-server: {missing}"
