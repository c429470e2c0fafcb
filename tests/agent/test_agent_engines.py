"""Engines on this node: where their programs are and which versions the plugins read."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.agent.engines import NodeEngines
from llmgw.plugins.manager import load_plugins


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


async def test_a_binary_under_engines_dir_comes_first_and_gives_the_version(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_LLAMA_SERVER", raising=False)
    installed = script(tmp_path / "engines" / "llamacpp" / "bin" / "llama-server",
                       'echo "version: 7777 (abcdef0)" >&2\necho "built with cc" >&2')
    script(tmp_path / "path" / "llama-server", 'echo "version: 1 (other)" >&2')
    engines = NodeEngines(load_plugins().engines(), tmp_path / "engines", path=str(tmp_path / "path"),
                          llama_cache=str(tmp_path / "cache"))
    assert engines.binary("llamacpp") == str(installed)
    versions = await engines.versions()
    assert versions["llamacpp"] == "7777 (abcdef0)"
    assert "sim" in versions  # llmgw itself
    assert "vllm" not in versions  # its plugin cannot tell: not counted as installed


def test_then_the_environment_then_path_then_the_build_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_LLAMA_SERVER", raising=False)
    engines = NodeEngines(load_plugins().engines(), tmp_path / "engines", path=str(tmp_path / "path"),
                          llama_cache=str(tmp_path / "cache"))
    assert engines.binary("llamacpp") is None
    cached = script(tmp_path / "cache" / "0123abcd" / "llama-server", "exit 0")
    assert engines.binary("llamacpp") == str(cached)
    on_path = script(tmp_path / "path" / "llama-server", "exit 0")
    assert engines.binary("llamacpp") == str(on_path)
    chosen = script(tmp_path / "chosen" / "llama-server", "exit 0")
    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(chosen))
    assert engines.binary("llamacpp") == str(chosen)
    assert engines.binary("sim") is None  # the plugin runs llmgw itself


def test_installed_lists_every_plugin(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_LLAMA_SERVER", raising=False)
    engines = NodeEngines(load_plugins().engines(), tmp_path, path=str(tmp_path), llama_cache=str(tmp_path))
    names = {e.name: e for e in engines.installed()}
    assert set(names) >= {"sim", "llamacpp", "vllm", "sglang", "trtllm"}
    assert names["llamacpp"].version is None and names["llamacpp"].binary is None
