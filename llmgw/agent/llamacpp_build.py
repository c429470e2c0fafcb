"""Build llama.cpp's `llama-server` from source, once per source, and keep it.

    python -m llmgw.agent.llamacpp_build --sdist llama_cpp_python-0.3.36.tar.gz
    python -m llmgw.agent.llamacpp_build --pypi [--version 0.3.36] [--cache DIR]
    python -m llmgw.agent.llamacpp_build --source path/to/llama.cpp

Each prints the built binary's path on its last line. The source is a
llama.cpp tree, or a `llama-cpp-python` sdist (a tarball, or unpacked),
which vendors llama.cpp under `vendor/llama.cpp`; `--pypi` fetches that sdist
with `pip download`. The build is CPU only, static (no shared libraries to
carry), without tests, examples, the web UI, curl or OpenSSL, and takes
about a quarter of an hour on two cores. It needs cmake and a C++ compiler
(Debian: `apt-get install cmake g++`).

The result is kept in `CACHE/<key>/llama-server`, the key a hash of the
source, the flags and the machine, with the vocabulary files the tests
need beside it (`vocab/ggml-vocab-*.gguf`). CACHE is `--cache`, else
`LLMGW_LLAMA_CPP_CACHE`, else `~/.cache/llmgw/llama.cpp`. The compiler
tunes for the CPU it runs on (llama.cpp's default): a cache is for the
machine, or the kind of machine, that built it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

__all__ = [
    "CMAKE_FLAGS", "PYPI_VERSION", "BuildError", "default_cache_dir", "find_cached", "find_vocab",
    "build_llama_server", "llama_root", "source_key", "download_sdist", "main",
]

#: The llama-cpp-python release `--pypi` fetches unless told otherwise: the one the tests were run with.
PYPI_VERSION = "0.3.36"
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
BINARY = "llama-server"
VOCABS = ("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf")
_SKIP_DIRS = {".git", "build", "__pycache__", ".github"}


class BuildError(Exception):
    """The build could not be made; the message says what to do."""


def default_cache_dir() -> Path:
    env = os.environ.get("LLMGW_LLAMA_CPP_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmgw" / "llama.cpp"


def find_cached(cache: str | os.PathLike[str] | None = None) -> Path | None:
    """The newest llama-server in the cache, or None."""
    root = Path(cache) if cache else default_cache_dir()
    found = [p for p in root.glob(f"*/{BINARY}") if p.is_file() and os.access(p, os.X_OK)]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def find_vocab(name: str = VOCABS[0], cache: str | os.PathLike[str] | None = None) -> Path | None:
    """A vocabulary GGUF kept beside a cached build (for writing a tiny model), or None."""
    root = Path(cache) if cache else default_cache_dir()
    found = [p for p in root.glob(f"*/vocab/{name}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


# --- sources ----------------------------------------------------------------------------


def llama_root(tree: Path) -> Path:
    """The llama.cpp directory in an unpacked tree: the tree itself, or its vendor/llama.cpp."""
    for candidate in (tree, tree / "vendor" / "llama.cpp"):
        if (candidate / "CMakeLists.txt").is_file() and (candidate / "include" / "llama.h").is_file() \
                and (candidate / "ggml").is_dir():
            return candidate
    raise BuildError(f"{tree}: neither a llama.cpp source tree nor a llama-cpp-python sdist "
                     "(no CMakeLists.txt with include/llama.h and ggml/, here or under vendor/llama.cpp)")


def source_key(source: Path, flags: Sequence[str] = CMAKE_FLAGS) -> str:
    """The cache key: a hash of the source (the tarball's bytes, or the tree's files), the flags and the machine."""
    h = hashlib.sha256()
    if source.is_file():
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    else:
        for path in _tree_files(source):
            h.update(str(path.relative_to(source)).encode() + b"\0")
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            h.update(b"\0")
    h.update("\n".join(flags).encode())
    h.update(f"{platform.system()} {platform.machine()}".encode())
    return h.hexdigest()[:24]


def _tree_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def download_sdist(dest: Path, version: str | None = PYPI_VERSION, *, python: str | None = None,
                   pip_args: Sequence[str] = ()) -> Path:
    """Fetch llama-cpp-python's sdist from PyPI (or the index `pip_args` names) into `dest` with pip;
    returns the tarball. `python` is one with pip (default: this one)."""
    spec = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    cmd = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", *pip_args, "-d", str(dest), spec]
    _say(f"fetching {spec}'s source from PyPI")
    result = subprocess.run(cmd, capture_output=True, text=True)
    tarballs = sorted(dest.glob("llama_cpp_python-*.tar.gz")) + sorted(dest.glob("llama-cpp-python-*.tar.gz"))
    if not tarballs:
        raise BuildError(f"pip download {spec} gave no sdist:\n{(result.stdout + result.stderr)[-2000:]}")
    return tarballs[-1]


# --- building ---------------------------------------------------------------------------


def build_llama_server(source: str | os.PathLike[str], *, cache: str | os.PathLike[str] | None = None,
                       jobs: int | None = None, flags: Sequence[str] = CMAKE_FLAGS, quiet: bool = False) -> Path:
    """The path of a llama-server built from `source` (a tree or an sdist tarball), building it if not cached."""
    source = Path(source).resolve()
    if not source.exists():
        raise BuildError(f"{source}: no such file or directory")
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed: the build needs cmake and a C++ compiler "
                             "(Debian: apt-get install cmake g++)")
    root = Path(cache) if cache else default_cache_dir()
    key = source_key(source, flags)
    home = root / key
    binary = home / BINARY
    if binary.is_file():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{key}.lock"):
        if binary.is_file():  # built by another process while this one waited
            return binary
        with tempfile.TemporaryDirectory(prefix=f".{key}.", dir=root) as tmp:
            work = Path(tmp)
            tree = _unpack(source, work / "src") if source.is_file() else source
            llama = llama_root(tree)
            _cmake(llama, work / "build", flags, jobs or os.cpu_count() or 2, quiet)
            built = work / "build" / "bin" / BINARY
            if not built.is_file():
                raise BuildError(f"the build finished without {built}")
            staging = work / "out"
            (staging / "vocab").mkdir(parents=True)
            shutil.copy2(built, staging / BINARY)
            for name in VOCABS:
                vocab = llama / "models" / name
                if vocab.is_file():
                    shutil.copy2(vocab, staging / "vocab" / name)
            version = subprocess.run([str(staging / BINARY), "--version"], capture_output=True, text=True, timeout=30)
            (staging / "build.json").write_text(json.dumps({
                "source": str(source), "key": key, "flags": list(flags), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "version": (version.stdout + version.stderr).strip().splitlines()[:2],
            }, indent=1))
            os.replace(staging, home)
    return binary


def _unpack(tarball: Path, dest: Path) -> Path:
    _say(f"unpacking {tarball.name}")
    dest.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        try:
            tar.extractall(dest, filter="data")
        except TypeError:  # Python before 3.11.4 (Debian 12's 3.11.2) has no filters
            for member in tar.getmembers():
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise BuildError(f"{tarball}: {member.name!r} would land outside the build directory") from None
            tar.extractall(dest)
    entries = [p for p in dest.iterdir()]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


def _cmake(src: Path, build: Path, flags: Sequence[str], jobs: int, quiet: bool) -> None:
    steps = (
        ["cmake", "-S", str(src), "-B", str(build), *flags],
        ["cmake", "--build", str(build), "--target", BINARY, "-j", str(jobs)],
    )
    for cmd in steps:
        _say(" ".join(cmd))
        out = subprocess.PIPE if quiet else 2  # the build's chatter on stderr: stdout is for the path
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            tail = (result.stdout or "")[-3000:] if quiet else "(its output is above)"
            raise BuildError(f"{cmd[0]} {cmd[1]} failed with code {result.returncode}: {tail}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _pypi_marker(cache: str | None, version: str) -> Path:
    return (Path(cache) if cache else default_cache_dir()) / f"pypi-{version}.key"


def _cached_pypi(cache: str | None, version: str | None) -> Path | None:
    """The build of a pinned PyPI release, without downloading its sdist again."""
    if not version:
        return None
    try:
        key = _pypi_marker(cache, version).read_text().strip()
    except OSError:
        return None
    binary = _pypi_marker(cache, version).parent / key / BINARY
    return binary if key and binary.is_file() else None


def _say(text: str) -> None:
    print(f"llamacpp_build: {text}", file=sys.stderr, flush=True)


# --- command line -----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmgw.agent.llamacpp_build",
        description="Build llama-server from llama.cpp's source (cached) and print its path.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--sdist", metavar="PATH", help="a llama-cpp-python sdist: the tarball, or unpacked")
    what.add_argument("--source", metavar="DIR", help="a llama.cpp source tree")
    what.add_argument("--pypi", action="store_true", help="fetch llama-cpp-python's sdist from PyPI with pip")
    parser.add_argument("--version", default=PYPI_VERSION,
                        help=f"with --pypi: the release to fetch (default {PYPI_VERSION}; 'latest' for the newest)")
    parser.add_argument("--cache", metavar="DIR", help=f"where builds are kept (default {default_cache_dir()})")
    parser.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: every CPU)")
    args = parser.parse_args(argv)
    try:
        if args.pypi:
            version = None if args.version == "latest" else args.version
            binary = _cached_pypi(args.cache, version)
            if binary is None:
                with tempfile.TemporaryDirectory(prefix="llmgw-sdist-") as tmp:
                    tarball = download_sdist(Path(tmp), version)
                    binary = build_llama_server(tarball, cache=args.cache, jobs=args.jobs)
                if version:
                    _pypi_marker(args.cache, version).write_text(binary.parent.name)
        else:
            binary = build_llama_server(args.sdist or args.source, cache=args.cache, jobs=args.jobs)
    except BuildError as exc:
        print(f"llamacpp_build: {exc}", file=sys.stderr)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
