"""The one file: built from this tree, it runs anywhere with the same Python."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pyz():
    subprocess.run([sys.executable, str(ROOT / "build.py")], check=True, cwd=ROOT, capture_output=True)
    path = ROOT / "dist" / "llmgw.pyz"
    assert path.exists()
    return path


def run(pyz, *args, env=None, cwd="/"):
    return subprocess.run([sys.executable, str(pyz), *args], capture_output=True, text=True, env=env, cwd=cwd)


@pytest.mark.slow
def test_version_says_what_it_was_built_from_and_for(pyz):
    out = run(pyz, "version", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["commit"] != "unknown"
    assert info["built_python"].startswith("CPython")
    assert info["built_platform"]


@pytest.mark.slow
def test_plugins_and_manual_are_inside(pyz):
    listed = run(pyz, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    engines = {e for p in json.loads(listed.stdout) for e in p["contributes"].get("engines", [])}
    assert {"sim", "llamacpp", "vllm", "sglang", "trtllm"} <= engines
    sinks = {s for p in json.loads(listed.stdout) for s in p["contributes"].get("notification sinks", [])}
    assert {"webhook", "slack"} <= sinks
    pages = json.loads(run(pyz, "docs", "--json").stdout)
    assert {p["page"] for p in pages} >= {"reference", "configuration"}


@pytest.mark.slow
def test_without_a_home_it_unpacks_elsewhere_and_says_where(pyz, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "SHIV_ROOT")}
    env["TMPDIR"] = str(tmp_path)
    out = run(pyz, "version", env=env)
    assert out.returncode == 0, out.stderr
    assert f"unpacking to {tmp_path}" in out.stderr


@pytest.mark.slow
def test_a_misspelt_key_is_named_by_config_check(pyz, tmp_path):
    bad = tmp_path / "server.yaml"
    bad.write_text("router:\n  timeouts:\n    dail: 5s\n")
    out = run(pyz, "config", "check", str(bad))
    assert out.returncode == 1
    assert "router.timeouts.dail" in out.stderr and "dial" in out.stderr
