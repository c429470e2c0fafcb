#!/usr/bin/env python3
"""Build llmgw's one file, or set up and run the tests.

    python3 build.py                 dist/llmgw-VERSION-linux-ARCH.pyz for this machine, also as dist/llmgw.pyz
    python3 build.py --arch aarch64  the file for the other kind of machine (x86_64 or aarch64)
    python3 build.py test ...        install into .venv and run every test (pytest args pass through)

The file holds the compiled packages for CPython 3.10 to 3.13 (wheels from
PyPI, downloaded once into .build/pyz/wheels per constraints, Python and
machine) and the pure-Python ones once; zipapp_boot.py, its __main__.py,
picks the set for the Python that runs it (docs/development.md).

Only the standard library is used here, so a bare machine with python3 can
run it; pip goes into a virtual environment under .build/ (and the tests'
tools into .venv/), pinned by constraints.txt.
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
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
BUILDINFO = ROOT / "llmgw" / "_buildinfo.json"
PACKED_DOCS = ROOT / "llmgw" / "_docs"  # the manual, copied in for the build only

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


# What the one file holds: llmgw with the `fast` extra and every plugin, for
# each of these Pythons; compiled packages once per Python, pure ones once.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ARCHES = ("x86_64", "aarch64")
PACKAGES = ("llmgw[fast]",)
PLUGIN_DIRS = "plugins/*"
# Optional packages, left out (with a note) for a Python or machine PyPI has no wheel of them for.
OPTIONAL = {"uvloop": "asyncio's own event loop is used instead",
            "orjson": "the standard json module is used instead"}
# glibc 2.28 (Debian 10, RHEL 8, Ubuntu 18.10) and later.
GLIBC_TAGS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_26", "manylinux_2_24", "manylinux_2_17",
              "manylinux2014", "manylinux_2_12", "manylinux2010", "manylinux_2_5", "manylinux1")
INTERPRETER = "/usr/bin/env python3"
BOOT = ROOT / "zipapp_boot.py"
WORK = ROOT / ".build" / "pyz"

# Runs pip for another Python: --python-version picks its wheels, and this
# makes environment markers (`async-timeout; python_version < "3.11"`, in
# constraints.txt and in packages' metadata) read as that Python would.
PIP_FOR = r'''
import sys
from pip._vendor.packaging import markers
version, machine = sys.argv.pop(1), sys.argv.pop(1)
_host = markers.default_environment
def _target():
    env = dict(_host())
    env.update(python_version=version, python_full_version=version + ".0", implementation_version=version + ".0",
               implementation_name="cpython", platform_python_implementation="CPython", sys_platform="linux",
               platform_system="Linux", os_name="posix", platform_machine=machine)
    return env
markers.default_environment = _target
from pip._internal.cli.main import main
sys.exit(main())
'''


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def build(arch: str) -> int:
    """One build at a time in this tree: a second waits for the first (they share .build/pyz and dist/)."""
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("build.py: another build of this tree is running; waiting for it", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(arch)


def _build(arch: str) -> int:
    constraints = ROOT / "constraints.txt"
    tools = make_venv(ROOT / ".build" / "venv", ["setuptools", "wheel"], constraints)
    version = _read_version()
    info = {
        "version": version,
        "commit": git_commit(),
        "built_python": "CPython " + ", ".join(PYTHONS),
        "built_platform": f"linux-{arch}",
        "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    plugins = sorted(Path(p) for p in glob.glob(str(ROOT / PLUGIN_DIRS)))
    local = WORK / "local"
    shutil.rmtree(local, ignore_errors=True)
    BUILDINFO.write_text(json.dumps(info, indent=2))
    shutil.rmtree(PACKED_DOCS, ignore_errors=True)
    PACKED_DOCS.mkdir()
    for page in sorted((ROOT / "docs").glob("*.md")):
        shutil.copy2(page, PACKED_DOCS / page.name)
    try:
        # Our own distributions, as wheels (pure Python: one set for every Python).
        run([tools, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", local, ROOT, *plugins],
            cwd=ROOT, env=_pip_env())
    finally:
        BUILDINFO.unlink(missing_ok=True)
        shutil.rmtree(PACKED_DOCS, ignore_errors=True)
        for leftover in [ROOT / "build", *ROOT.glob("plugins/*/build")]:
            shutil.rmtree(leftover, ignore_errors=True)
    wanted = [*PACKAGES, *(_dist_name(p) for p in plugins)]
    stages: dict[str, Path] = {}
    notes: list[str] = []
    for py in PYTHONS:
        wheels = _third_party_wheels(tools, py, arch, wanted, constraints, local, notes)
        stages[py] = _install(tools, py, arch, wanted, constraints, local, wheels)
    parts = _split(stages)
    output = ROOT / "dist" / f"llmgw-{version}-linux-{arch}.pyz"
    build_id = _write_pyz(output, parts, {"version": version, "id": "", "pythons": list(PYTHONS), "arch": arch})
    shutil.rmtree(WORK / "stage", ignore_errors=True)
    size = output.stat().st_size / 1e6
    print(f"built {output.relative_to(ROOT)} ({size:.1f} MB): llmgw {version}, commit {info['commit']}, id {build_id}")
    print(f"it runs on CPython {PYTHONS[0]} to {PYTHONS[-1]} on Linux {arch}")
    for note in notes:
        print(f"note: {note}")
    if arch == host_arch():
        default = ROOT / "dist" / "llmgw.pyz"
        tmp = default.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(output, tmp)  # the same file under a second name
        except OSError:
            shutil.copy2(output, tmp)
        tmp.replace(default)
        print(f"and as {default.relative_to(ROOT)} (this machine's kind)")
    return 0


def _pip_env() -> dict[str, str]:
    return {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_WARN_SCRIPT_LOCATION": "1"}


def _dist_name(plugin_dir: Path) -> str:
    for line in (plugin_dir / "setup.cfg").read_text().splitlines():
        if line.startswith("name"):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"{plugin_dir}/setup.cfg has no name")


def _target_args(py: str, arch: str) -> list[str]:
    abi = "cp" + py.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", py, "--implementation", "cp", "--abi", abi, "--abi", "abi3",
            "--abi", "none"]
    for tag in GLIBC_TAGS:
        args += ["--platform", f"{tag}_{arch}"]
    return args


def _pip_for(tools: Path, py: str, arch: str) -> list:
    return [tools, "-c", PIP_FOR, py, arch]


def run_pip_for(cmd: list, py: str, arch: str, **kw) -> None:
    """run(), printing `pip for CPython 3.10 on x86_64: download ...` instead of PIP_FOR's text."""
    print(f"+ pip for CPython {py} on {arch}:", " ".join(str(c) for c in cmd[5:] if not str(c).startswith("--platform")
                                                      and not str(c).endswith(f"_{arch}")), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def _third_party_wheels(tools, py, arch, wanted, constraints, local, notes) -> Path:
    """Every wheel llmgw needs on this Python and machine, downloaded once per constraints, Python and arch."""
    key = hashlib.sha256("\n".join([
        constraints.read_text(), py, arch, " ".join(GLIBC_TAGS), *wanted,
        *((ROOT / "setup.cfg").read_text(), *(p.read_text() for p in sorted(ROOT.glob("plugins/*/setup.cfg")))),
    ]).encode()).hexdigest()[:16]
    cache = WORK / "wheels" / f"cp{py.replace('.', '')}-{arch}-{key}"
    if (cache / ".complete").exists():
        return cache
    for stale in (WORK / "wheels").glob(f"cp{py.replace('.', '')}-{arch}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    cache.mkdir(parents=True)
    reqs = list(wanted)
    cmd = [*_pip_for(tools, py, arch), "download", "-q", *_target_args(py, arch), "-c", constraints,
           "--find-links", local, "-d", cache]
    try:
        run_pip_for([*cmd, *reqs], py, arch, cwd=ROOT, env=_pip_env())
    except subprocess.CalledProcessError:
        # Without the optional packages (uvloop has no wheel for every Python and machine).
        reqs = [r.replace("[fast]", "") for r in reqs]
        run_pip_for([*cmd, *reqs], py, arch, cwd=ROOT, env=_pip_env())
        for name, instead in OPTIONAL.items():
            notes.append(f"{name} has no wheel for CPython {py} on {arch}: {instead} there")
        (cache / ".without-optional").write_text("\n".join(OPTIONAL))
    for ours in local.glob("*.whl"):  # our own wheels are built fresh every time
        (cache / ours.name).unlink(missing_ok=True)
    (cache / ".complete").write_text("")
    return cache


def _install(tools, py, arch, wanted, constraints, local, wheels) -> Path:
    stage = WORK / "stage" / f"cp{py.replace('.', '')}"
    shutil.rmtree(stage, ignore_errors=True)
    reqs = list(wanted)
    if (wheels / ".without-optional").exists():
        reqs = [r.replace("[fast]", "") for r in reqs]
    run_pip_for([*_pip_for(tools, py, arch), "install", "-q", "--no-index", "--find-links", local, "--find-links",
                 wheels, *_target_args(py, arch), "--no-compile", "-c", constraints, "--target", stage, *reqs],
                py, arch, cwd=ROOT, env=_pip_env())
    shutil.rmtree(stage / "bin", ignore_errors=True)  # console scripts: the file has its own start
    return stage


def _distributions(stage: Path) -> dict[str, tuple[str, bool, list[str]]]:
    """name-version -> (name, pure, files) for every distribution installed into stage."""
    found = {}
    for meta in sorted(stage.glob("*.dist-info")):
        wheel = (meta / "WHEEL").read_text() if (meta / "WHEEL").exists() else ""
        tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
        pure = bool(tags) and all(t.endswith("-none-any") for t in tags)
        files = []
        for line in (meta / "RECORD").read_text().splitlines():
            path = line.rsplit(",", 2)[0]
            if path and not path.startswith("..") and (stage / path).is_file():
                files.append(path)
        found[meta.name[: -len(".dist-info")]] = (meta.name, pure, files)
    return found


def _split(stages: dict[str, Path]) -> dict[str, list[tuple[Path, str]]]:
    """part name -> (file, name in the part): 'common' holds pure distributions every Python has alike."""
    dists = {py: _distributions(stage) for py, stage in stages.items()}
    common = set.intersection(*(set(d) for d in dists.values()))
    common = {key for key in common if all(dists[py][key][1] for py in dists)}
    parts: dict[str, list[tuple[Path, str]]] = {"common": []}
    first = next(iter(stages))
    for key in sorted(common):
        parts["common"] += [(stages[first] / f, f) for f in dists[first][key][2]]
    for py, stage in stages.items():
        taken = {f for key in common for f in dists[py][key][2]}
        part = parts.setdefault(f"cp{py.replace('.', '')}", [])
        for path in sorted(stage.rglob("*")):
            rel = path.relative_to(stage).as_posix()
            if path.is_file() and rel not in taken and "__pycache__" not in rel:
                part.append((path, rel))
    return parts


def _write_pyz(output: Path, parts: dict[str, list[tuple[Path, str]]], boot: dict) -> str:
    """The archive: a shebang, __main__.py (the boot), and payload/<part>.zip, stored, for each part."""
    WORK.mkdir(parents=True, exist_ok=True)
    inner = {}
    digest = hashlib.sha256()
    for name, files in sorted(parts.items()):
        path = WORK / f"{name}.zip"
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
            for src, arc in sorted(files, key=lambda f: f[1]):
                item = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
                item.external_attr = (0o755 if os.access(src, os.X_OK) else 0o644) << 16
                item.compress_type = zipfile.ZIP_DEFLATED
                data = src.read_bytes()
                digest.update(arc.encode() + b"\0" + hashlib.sha256(data).digest())
                z.writestr(item, data)
        inner[name] = path
    build_id = digest.hexdigest()[:12]
    boot = {**boot, "id": build_id}
    text = BOOT.read_text()
    marker = next(line for line in text.splitlines() if line.startswith("BUILD = "))
    main_py = text.replace(marker, "BUILD = " + json.dumps(boot))
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    with open(tmp, "wb") as raw:
        raw.write(f"#!{INTERPRETER}\n".encode())
        with zipfile.ZipFile(raw, "w") as z:
            item = zipfile.ZipInfo("__main__.py", date_time=(1980, 1, 1, 0, 0, 0))
            item.compress_type = zipfile.ZIP_DEFLATED
            item.external_attr = 0o644 << 16
            z.writestr(item, main_py)
            for name, path in sorted(inner.items()):
                item = zipfile.ZipInfo(f"payload/{name}.zip", date_time=(1980, 1, 1, 0, 0, 0))
                item.external_attr = 0o644 << 16
                with open(path, "rb") as src, z.open(item, "w", force_zip64=True) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                path.unlink()
    tmp.chmod(0o755)
    tmp.replace(output)
    return build_id

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
    arch = host_arch()
    if argv[:1] == ["--arch"] and len(argv) == 2:
        arch, argv = argv[1], []
    elif len(argv) == 1 and argv[0].startswith("--arch="):
        arch, argv = argv[0].split("=", 1)[1], []
    if argv:
        print(f"build.py: unknown command {' '.join(argv)!r}; see build.py --help", file=sys.stderr)
        return 2
    if arch not in ARCHES:
        print(f"build.py: --arch {arch!r}: the file is built for {' or '.join(ARCHES)}", file=sys.stderr)
        return 2
    return build(arch)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
