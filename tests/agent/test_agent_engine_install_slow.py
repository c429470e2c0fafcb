"""The installer, for real: pip into a venv of its own from a package index served on 127.0.0.1 (with uv:
test_agent_engine_install_uv_slow.py)."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from fake_vllm import write_wheel

from llmgw.agent.engine_install import EngineInstaller, InstallError
from llmgw.agent.engines import NodeEngines
from llmgw.plugins.manager import load_plugins

pytestmark = pytest.mark.slow


def tiny_wheel(dest: Path, name: str, version: str) -> Path:
    """A pure-Python wheel with one module and one console script (no engine inside)."""
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{name}/cli.py": "def main():\n    print('fake engine')\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{name}-{version}.dist-info/entry_points.txt": f"[console_scripts]\n{name}-serve = {name}.cli:main\n",
    }
    return write_wheel(dest, name, version, files)


@pytest.fixture
def index(tmp_path):
    """A PEP 503 simple index holding vllm 0.0.1, on 127.0.0.1."""
    root = tmp_path / "index"
    project = root / "simple" / "vllm"
    project.mkdir(parents=True)
    wheel = tiny_wheel(project, "vllm", "0.0.1")
    (project / "index.html").write_text(f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>')
    (root / "simple" / "index.html").write_text('<html><body><a href="vllm/">vllm</a></body></html>')
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


async def test_vllm_is_installed_from_the_index_and_then_advertised(tmp_path, index):
    engines_dir = tmp_path / "engines"
    installer = EngineInstaller(engines_dir, index_url=index, uv="")  # pip, whether or not uv is on PATH
    steps: list[str] = []
    version, program = await installer.install("vllm", "", steps.append)
    assert version == "0.0.1" and program == str(engines_dir / "vllm" / "0.0.1" / "bin" / "python")
    assert steps[0] == "creating a Python environment" and "pip install vllm==0.0.1" in steps
    assert (engines_dir / "vllm" / "0.0.1" / "bin" / "vllm-serve").is_file()  # its console script, in its own venv
    node = NodeEngines(load_plugins().engines(), engines_dir, path=str(tmp_path / "nothing"),
                       llama_cache=str(tmp_path / "cache"))
    assert (await node.versions())["vllm"] == "0.0.1"


async def test_a_version_the_index_lacks_fails_in_pips_words_and_leaves_nothing(tmp_path, index):
    engines_dir = tmp_path / "engines"
    installer = EngineInstaller(engines_dir, index_url=index, uv="")  # pip, whether or not uv is on PATH
    with pytest.raises(InstallError) as failed:
        await installer.install("vllm", "9.9.9")
    assert "No matching distribution found for vllm==9.9.9" in str(failed.value)
    assert "\x1b[" not in str(failed.value)
    assert [p.name for p in (engines_dir / "vllm").iterdir()] == []  # no half-made environment
