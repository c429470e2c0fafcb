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


def fake_python_env(root: Path, dist: str, version: str, program: str = "python3") -> Path:
    """A virtual environment as the installer leaves one, holding only `dist`'s metadata (no engine code)."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = bin_dir / program
    if program.startswith("python"):
        python.symlink_to(os.path.realpath(os.sys.executable))
    else:
        script(python, "exit 0")
    info = root / "lib" / "python3.12" / "site-packages" / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nA fake.\n")
    return python


async def test_python_engines_tell_their_version_from_their_environment_without_importing_it(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_LLAMA_SERVER", raising=False)
    engines_dir = tmp_path / "engines"
    old = fake_python_env(engines_dir / "vllm" / "0.8.5", "vllm", "0.8.5")
    new = fake_python_env(engines_dir / "vllm" / "0.10.0", "vllm", "0.10.0")
    fake_python_env(engines_dir / "sglang" / "0.4.6", "sglang", "0.4.6")
    trt = fake_python_env(engines_dir / "trtllm" / "0.20.0", "tensorrt_llm", "0.20.0", program="trtllm-serve")
    engines = NodeEngines(load_plugins().engines(), engines_dir, path=str(tmp_path / "path"),
                          llama_cache=str(tmp_path / "cache"))
    versions = await engines.versions()
    assert versions["vllm"] == "0.10.0"  # the newest, as numbers: 0.10 after 0.8
    assert versions["sglang"] == "0.4.6" and versions["trtllm"] == "0.20.0"
    found = {(e.name, e.version): e.binary for e in await engines.scan()}
    assert found[("vllm", "0.8.5")] == str(old) and found[("vllm", "0.10.0")] == str(new)
    assert found[("trtllm", "0.20.0")] == str(trt)
    assert engines.binary("vllm") == str(new)
    assert engines.binary("vllm", "0.8.5") == str(old)  # a model pinning the version gets that one


async def test_an_environment_without_the_engine_is_not_counted(tmp_path):
    engines_dir = tmp_path / "engines"
    fake_python_env(engines_dir / "vllm" / "broken", "something_else", "1.0")
    engines = NodeEngines(load_plugins().engines(), engines_dir, path=str(tmp_path / "path"),
                          llama_cache=str(tmp_path / "cache"))
    assert "vllm" not in await engines.versions()
