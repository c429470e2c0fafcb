"""The one file: built once from this tree, it runs on CPython 3.10 to 3.13 and says so on others."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from up_started import up_started

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


@pytest.fixture(scope="session")
def pyz():
    from llmgw.testing.zipapp import fresh_pyz

    return fresh_pyz()


@pytest.fixture(scope="session")
def unpack_root(tmp_path_factory):
    """One place all these tests unpack into: each Python's part is unpacked once, by its first test."""
    return tmp_path_factory.mktemp("unpacked")


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A two-layer GGUF with random weights, written by the test environment's gguf."""
    pytest.importorskip("gguf")
    from llmgw.testing.tiny_gguf import write_tiny_gguf, write_vocab_gguf

    where = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(where / "tiny.gguf", write_vocab_gguf(where / "vocab.gguf"), layers=2, width=64, heads=4,
                           kv_heads=2)


def interpreter(version: str) -> str | None:
    """A CPython of this version on this machine (PATH, pyenv, /usr/bin), or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}"), *sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}")),
                  f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for exe in candidates:
        if exe and os.access(exe, os.X_OK):
            probe = subprocess.run([str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == version:
                return str(exe)
    return None


def python(version: str) -> str:
    exe = interpreter(version)
    if exe is None:
        pytest.skip(f"no CPython {version} on this machine")
    return exe


def run(pyz, *args, env=None, cwd="/", exe=None):
    return subprocess.run([exe or sys.executable, str(pyz), *args], capture_output=True, text=True, env=env, cwd=cwd)


@pytest.mark.slow
def test_version_says_what_it_was_built_from_and_for(pyz):
    out = run(pyz, "version", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["commit"] != "unknown"
    assert info["built_python"] == "CPython " + ", ".join(PYTHONS)
    assert info["built_platform"] == "linux-" + os.uname().machine


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
def test_server_kube_helm_writes_the_whole_chart_from_the_one_file(pyz, tmp_path):
    out = run(pyz, "server", "kube", "--helm", "--out", str(tmp_path / "kube"), "--agent-host", "cp0.example.com",
              "--agent-host", "cp1.example.com")
    assert out.returncode == 0, out.stderr
    source = ROOT / "llmgw" / "install" / "kubernetes" / "chart"
    chart = tmp_path / "kube" / "helm" / "llmgw"
    files = sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert "templates/control-plane.yaml" in files and "templates/_helpers.tpl" in files
    assert sorted(str(p.relative_to(chart)) for p in chart.rglob("*") if p.is_file()) == files
    for name in files:
        if name != "Chart.yaml":  # its appVersion is the build's
            assert (chart / name).read_text() == (source / name).read_text(), name
    assert (tmp_path / "kube" / "helm" / "values.yaml").is_file()


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


@pytest.mark.slow
def test_it_holds_each_pythons_compiled_packages_and_the_pure_ones_once(pyz):
    with zipfile.ZipFile(pyz) as outer:
        assert sorted(outer.namelist()) == ["__main__.py", "payload/common.zip",
                                            *(f"payload/cp{v.replace('.', '')}.zip" for v in PYTHONS)]
        common = zipfile.ZipFile(io.BytesIO(outer.read("payload/common.zip"))).namelist()
        assert any(n.startswith("gguf/") for n in common) and any(n.startswith("llmgw/cli/") for n in common)
        for version in PYTHONS:
            tag = version.replace(".", "")
            names = zipfile.ZipFile(io.BytesIO(outer.read(f"payload/cp{tag}.zip"))).namelist()
            for package in ("numpy", "aiohttp", "cryptography", "zmq", "uvloop"):
                assert any(n.startswith(f"{package}/") and (f"cpython-{tag}-" in n or ".abi3." in n) for n in names), \
                    (version, package)
            assert not any(n.startswith(("gguf/", "llmgw/")) for n in names)
    assert (ROOT / "dist" / f"llmgw-{_version()}-linux-{os.uname().machine}.pyz").read_bytes() == pyz.read_bytes()


def _version() -> str:
    from llmgw import __version__

    return __version__


@pytest.mark.slow
@pytest.mark.parametrize("version", PYTHONS)
def test_each_python_runs_version_config_check_up_and_plan(pyz, unpack_root, tiny_gguf, version, tmp_path):
    import openai

    exe = python(version)
    env = {**os.environ, "SHIV_ROOT": str(unpack_root), "PYTHONUNBUFFERED": "1"}
    out = run(pyz, "version", env=env, exe=exe)
    assert out.returncode == 0, out.stderr
    assert f"running on: CPython {version}." in out.stdout
    first = out.stdout.splitlines()[0]
    assert run(pyz, "--version", env=env, exe=exe).stdout.strip() == first

    example = tmp_path / "server.yaml"
    example.write_text(run(pyz, "config", "example", env=env, exe=exe).stdout)
    checked = run(pyz, "config", "check", str(example), env=env, exe=exe)
    assert checked.returncode == 0, checked.stderr

    proc = subprocess.Popen([exe, str(pyz), "up", "--dir", str(tmp_path / "up"), "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        info = up_started(proc)
        client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"])
        answer = client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=5)
        assert answer.choices[0].message.content
        # The file's own gguf and numpy read the header, on this Python.
        planned = run(pyz, "ctl", "model", "plan", str(tiny_gguf), "--json", exe=exe,
                      env={**env, "LLMGW_ADMIN_URL": info["admin_url"], "LLMGW_ADMIN_TOKEN": info["admin_token"]})
        assert planned.returncode == 0, planned.stderr
        [planned_file] = json.loads(planned.stdout)["files"]
        assert planned_file["kv_cache_bytes"] > 0
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.9", "3.14"])
def test_an_unsupported_python_gets_one_line_and_exit_2(pyz, unpack_root, version):
    exe = python(version)
    out = run(pyz, "--help", env={**os.environ, "SHIV_ROOT": str(unpack_root)}, exe=exe)
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("llmgw ") and f"runs on CPython 3.10 to 3.13 on Linux {os.uname().machine}, " \
        f"not on CPython {version}." in line
