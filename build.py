#!/usr/bin/env python3
"""Build llmgw's one file, or set up and run the tests.

    python3 build.py           make dist/llmgw.pyz from shiv.toml
    python3 build.py test ...  install into .venv and run every test (pytest args pass through)

Only the standard library is used here, so a bare machine with python3 can
run it; the tools it needs (shiv, pip) go into virtual environments under
.build/ and .venv/, pinned by constraints.txt.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
BUILDINFO = ROOT / "llmgw" / "_buildinfo.json"
PACKED_DOCS = ROOT / "llmgw" / "_docs"  # the manual, copied in for the build only

# Replaces shiv's __main__.py: picks a place to unpack before shiv's bootstrap
# runs, so a read-only or missing HOME still works, and says where it went.
MAIN_PY = '''\
# -*- coding: utf-8 -*-
import os, sys, tempfile


def _writable(path):
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".llmgw-write-test-%d" % os.getpid())
        with open(probe, "w"):
            pass
        os.unlink(probe)
        return True
    except OSError:
        return False


def _private_dir(path):
    # A shared /tmp: the directory must be ours and closed to others.
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SystemExit("llmgw: %s is not a private directory of this user; set SHIV_ROOT" % path)
    return path


if not os.environ.get("SHIV_ROOT"):
    home = os.environ.get("HOME")
    default = os.path.join(home, ".shiv") if home else None
    if not default or not _writable(default):
        root = _private_dir(os.path.join(tempfile.gettempdir(), "llmgw-%d" % os.getuid()))
        os.environ["SHIV_ROOT"] = root
        sys.stderr.write("llmgw: HOME is not writable; unpacking to %s (set SHIV_ROOT to choose)\\n" % root)

os.environ.setdefault("LLMGW_PYZ", os.path.abspath(sys.argv[0]))
import _bootstrap
_bootstrap.bootstrap()
'''


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def make_venv(path: Path, requirements: list[str], constraints: Path) -> Path:
    """A virtual environment at `path` with `requirements`, made once and refreshed when they change."""
    python = path / "bin" / "python"
    stamp = path / ".llmgw-stamp"
    want = hashlib.sha256(
        (json.dumps(requirements) + constraints.read_text() + sys.version).encode()
        + b"".join(p.read_bytes() for p in sorted(ROOT.glob("plugins/*/setup.cfg")) + [ROOT / "setup.cfg"])
    ).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    run([python, "-m", "pip", "install", "-q", "--upgrade", "pip", "setuptools", "wheel"])
    run([python, "-m", "pip", "install", "-q", "-c", constraints, *requirements])
    stamp.write_text(want)
    return python


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        commit = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty and commit != "unknown" else "")
    except OSError:
        return "unknown"


def build() -> int:
    config = tomllib.loads((ROOT / "shiv.toml").read_text())["zipapp"]
    constraints = ROOT / config["constraints"]
    output = ROOT / config["output"]
    tools = make_venv(ROOT / ".build" / "venv", ["shiv"], constraints)
    packages = [str(ROOT / p) if p.startswith(".") else p for p in config["install"]["packages"]]
    plugins = sorted(glob.glob(str(ROOT / config["install"]["plugin_dirs"])))
    version = _read_version()
    info = {
        "version": version,
        "commit": git_commit(),
        "built_python": f"{platform.python_implementation()} {platform.python_version()}",
        "built_platform": f"{sys.platform}-{platform.machine()}",
        "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    BUILDINFO.write_text(json.dumps(info, indent=2))
    shutil.rmtree(PACKED_DOCS, ignore_errors=True)
    PACKED_DOCS.mkdir()
    for page in sorted((ROOT / "docs").glob("*.md")):
        shutil.copy2(page, PACKED_DOCS / page.name)
    output.parent.mkdir(parents=True, exist_ok=True)
    staged = output.with_suffix(".shiv.pyz")
    try:
        cmd = [tools, "-m", "shiv", "--console-script", config["console_script"], "--output-file", staged,
               "--python", config["interpreter"], "--reproducible", "--no-cache"]
        if config.get("compressed", True):
            cmd.append("--compressed")
        # Everything after shiv's own options goes to pip; the pins go by
        # PIP_CONSTRAINT because shiv reads -c as its own option.
        cmd += [*packages, *plugins]
        run(cmd, cwd=ROOT, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONSTRAINT": str(constraints)})
        _replace_main(staged, output, config["interpreter"])
    finally:
        BUILDINFO.unlink(missing_ok=True)
        shutil.rmtree(PACKED_DOCS, ignore_errors=True)
        staged.unlink(missing_ok=True)
        for leftover in ROOT.glob("build"):
            shutil.rmtree(leftover, ignore_errors=True)
    size = output.stat().st_size / 1e6
    print(f"built {output.relative_to(ROOT)} ({size:.1f} MB): llmgw {version}, commit {info['commit']}")
    print(f"it holds C extensions (aiohttp, asyncpg, msgpack, cryptography, pyzmq, uvloop) built for "
          f"{info['built_python']} on {info['built_platform']}: run it on machines of that kind")
    return 0


def _replace_main(staged: Path, output: Path, interpreter: str) -> None:
    """Copy the shiv archive, swapping in our __main__.py (see MAIN_PY)."""
    tmp = output.with_suffix(".tmp")
    with zipfile.ZipFile(staged) as src, open(tmp, "wb") as raw:
        raw.write(f"#!{interpreter}\n".encode())
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                data = MAIN_PY.encode() if item.filename == "__main__.py" else src.read(item.filename)
                dst.writestr(item, data)
    tmp.chmod(0o755)
    tmp.replace(output)


def _read_version() -> str:
    for line in (ROOT / "llmgw" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit("llmgw/__init__.py has no __version__")


def test(pytest_args: list[str]) -> int:
    """Install llmgw, its plugins and the test tools into .venv, then run every test, slow ones too."""
    constraints = ROOT / "constraints.txt"
    plugins = sorted(glob.glob(str(ROOT / "plugins" / "*")))
    reqs = ["-e", f"{ROOT}[fast,test]"]
    for p in plugins:
        reqs += ["-e", p]
    python = make_venv(ROOT / ".venv", reqs, constraints)
    args = pytest_args or ["-m", "", "-q"]
    return subprocess.run([str(python), "-m", "pytest", *args], cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if argv and argv[0] == "test":
        return test(argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv:
        print(f"build.py: unknown command {argv[0]!r}; see build.py --help", file=sys.stderr)
        return 2
    return build()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
