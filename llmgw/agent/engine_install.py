"""Installing an inference engine on this node, when the control plane asks (a Provision message).

Each installation goes under the agent's `engines_dir`, one per version,
where `llmgw.agent.engines` finds it:

- vLLM, SGLang and TensorRT-LLM: a Python virtual environment of their own,
  `ENGINES/<engine>/<version>/`, made with `python -m venv` and filled with
  `pip install <package>==<version>`, or, where a `uv` binary is found
  (`ENGINES/bin/uv`, then the agent's PATH), made with `uv venv` and filled
  with `uv pip install`, which is many times quicker. The index: agent.yaml's
  `engine_index_url`; else the mirror's (`MIRROR/simple/`, llmgw/mirror/
  wheel_index.py) when the agent knows a mirror and it offers the package;
  else PyPI. `engine_pip_args` are added. No version asked: the newest the
  index offers (`pip index versions`, `uv pip compile`).
- llama.cpp: `llama-server` built from the llama.cpp sources in
  `llama-cpp-python`'s sdist, fetched from the same index
  (`llmgw.agent.llamacpp_build`: cached by source hash, CUDA when the node
  has a GPU and `nvcc`, CPU otherwise), copied to
  `ENGINES/llamacpp/<build>/llama-server`. The version asked for is
  llama-cpp-python's release; the version advertised is the binary's own.

A failed installation raises `InstallError` with the installer's own last
lines (pip's, cmake's), cleaned of colour codes and noise, and leaves no
half-made environment behind.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

import aiohttp

from llmgw.plugins.engine_versions import dist_version

__all__ = ["PACKAGES", "INSTALLABLE", "InstallError", "EngineInstaller", "clean_output"]

#: The Python package each Python engine is installed from.
PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}
#: Every engine the installer can install.
INSTALLABLE = (*PACKAGES, "llamacpp")
TAIL = 12  # lines of the installer's output kept for a failure
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NOISE = re.compile(r"^\s*(\[notice\]|WARNING: You are using pip|━|\||Using Python \S+ environment at)", re.I)
_VERSION_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")

Progress = Callable[[str], None]


class InstallError(Exception):
    """An engine could not be installed; the message is the installer's own words."""


def clean_output(lines: Sequence[str], keep: int = TAIL) -> str:
    """The last `keep` lines that say something: colour codes, progress bars and pip's notices dropped."""
    kept = [_ANSI.sub("", line).rstrip() for line in lines]
    kept = [line for line in kept if line.strip() and not _NOISE.match(line)]
    return "\n".join(kept[-keep:])


class EngineInstaller:
    """Installs engines into `engines_dir`; one installation at a time per engine."""

    def __init__(self, engines_dir: str | os.PathLike[str], *, index_url: str = "",
                 pip_args: Sequence[str] = (), python: str | None = None, llama_cache: str | None = None,
                 has_gpu: Callable[[], bool] = lambda: False, mirror: Callable[[], str] = lambda: "",
                 uv: str | None = None, offline: Callable[[], str] = lambda: "") -> None:
        self.dir = Path(engines_dir)
        self.offline = offline  #: why PyPI may not be asked (the cluster is offline); "" when it may
        self.index_url = index_url
        self.mirror = mirror  #: the mirror's address now ("" when none is known): its index serves wheels
        self.uv = uv  #: a uv binary to use; None looks for one at each install
        self.pip_args = tuple(pip_args)
        self.python = python or _base_python()
        self.llama_cache = llama_cache
        self.has_gpu = has_gpu
        self._locks: dict[str, asyncio.Lock] = {}

    def _index_args(self, index: str | None = None) -> list[str]:
        index = self.index_url if index is None else index
        return (["--index-url", index] if index else []) + list(self.pip_args)

    def find_uv(self) -> str | None:
        """The uv binary installs use: the one given, else ENGINES/bin/uv, else one on PATH; None: pip."""
        if self.uv is not None:
            return self.uv or None
        own = self.dir / "bin" / "uv"
        if own.is_file() and os.access(own, os.X_OK):
            return str(own)
        return shutil.which("uv")

    async def index_for(self, package: str) -> str:
        """The index to install `package` from: engine_index_url; else the mirror's when it offers the package;
        else "" (PyPI), unless the cluster is offline (InstallError)."""
        if self.index_url:
            return self.index_url
        index = await self._mirror_index(package)
        offline = self.offline()
        if not index and offline:
            raise InstallError(f"{package}: the mirror offers none, and {offline}, so PyPI is not asked; bring it "
                               "in an offline bundle (llmgw bundle create --engines) or set engine_index_url")
        return index

    async def _mirror_index(self, package: str) -> str:
        mirror = (self.mirror() or "").rstrip("/")
        if not mirror:
            return ""
        index = f"{mirror}/simple/"
        url = f"{index}{re.sub(r'[-_.]+', '-', package).lower()}/"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
                async with http.get(url) as resp:
                    return index if resp.status == 200 else ""
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return ""  # no mirror to be reached: PyPI

    async def install(self, engine: str, version: str = "", progress: Progress = lambda step: None,
                      output: Progress | None = None) -> tuple[str, str]:
        """Install `engine` (at `version`, else the newest); returns (its version, its program's path).

        `progress` hears each step (a few); `output` the installer's lines worth showing (pip's Collecting …,
        many: a caller may thin them out), `progress` when not given."""
        if engine not in INSTALLABLE:
            raise InstallError(f"llmgw cannot install {engine!r}: it installs {', '.join(INSTALLABLE)}; "
                               f"install it under {self.dir / engine} by hand")
        if version and not _VERSION_OK.match(version):
            raise InstallError(f"{version!r} is not a version: letters, digits and . + ! _ - only")
        lock = self._locks.setdefault(engine, asyncio.Lock())
        async with lock:
            if engine == "llamacpp":
                return await self._llamacpp(version, progress)
            return await self._python_engine(engine, version, progress, output or progress)

    # ------------------------------------------------------------------ Python engines

    async def _python_engine(self, engine: str, version: str, progress: Progress,
                             output: Progress) -> tuple[str, str]:
        package = PACKAGES[engine]
        home = self.dir / engine
        home.mkdir(parents=True, exist_ok=True)
        index = await self.index_for(package)
        uv = self.find_uv()
        staging = Path(tempfile.mkdtemp(prefix=".installing-", dir=home))
        try:
            if uv:
                progress(f"creating a Python environment with {uv}")
                await _run([uv, "venv", "--no-progress", "--quiet", "--python", self.python, str(staging)],
                           "uv venv")
            else:
                progress("creating a Python environment")
                await _run([self.python, "-m", "venv", str(staging)], "python -m venv")
            python = str(staging / "bin" / "python")
            if index:
                progress(f"packages from {index}")
            if not version:
                progress(f"asking the index for {package}'s newest version")
                version = await (self._newest_uv(uv, python, package, index) if uv
                                 else self._newest(python, package, index))
            final = home / version
            if (found := dist_version(final / "bin" / "python", package)) == version:
                return version, str(final / "bin" / _program(engine))
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)  # before pip: the scripts pip writes name their environment's path
            staging = final
            python = str(final / "bin" / "python")
            if uv:
                progress(f"uv pip install {package}=={version}")
                await _run([uv, "pip", "install", "--no-progress", "--python", python, *self._index_args(index),
                            f"{package}=={version}"], "uv pip install", progress=_pip_progress(output))
            else:
                progress(f"pip install {package}=={version}")
                await _run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                            "--progress-bar", "off", *self._index_args(index), f"{package}=={version}"],
                           "pip install", progress=_pip_progress(output))
            found = dist_version(python, package)
            if found is None:
                raise InstallError(f"pip installed {package}=={version} but the environment does not hold it")
            program = final / "bin" / _program(engine)
            if not program.exists():
                raise InstallError(f"{package} {found} is installed but has no {program.name} in {final / 'bin'}")
            staging = None  # kept
            return found, str(program)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    async def _newest_uv(self, uv: str, python: str, package: str, index: str) -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".in", dir=self.dir) as wanted:
            wanted.write(package + "\n")
            wanted.flush()
            out = await _run([uv, "pip", "compile", "--no-progress", "--quiet", "--no-header", "--no-annotate",
                              "--no-deps", "--python", python, *self._index_args(index), wanted.name],
                             "uv pip compile")
        for line in out:
            m = re.match(rf"^{re.escape(package)}==(\S+)", line.strip(), re.I)
            if m:
                return m.group(1)
        raise InstallError(clean_output(out) or f"the index offers no {package}")

    async def _newest(self, python: str, package: str, index: str | None = None) -> str:
        out = await _run([python, "-m", "pip", "index", "versions", "--disable-pip-version-check",
                          *self._index_args(index), package], "pip index versions")
        for line in out:
            m = re.match(rf"^{re.escape(package)}\s*\(([^)]+)\)", line.strip(), re.I)
            if m:
                return m.group(1)
        raise InstallError(clean_output(out) or f"the index offers no {package}")

    # ------------------------------------------------------------------ llama.cpp

    async def _llamacpp(self, version: str, progress: Progress) -> tuple[str, str]:
        from llmgw.agent import llamacpp_build as build

        flags = list(build.CMAKE_FLAGS)
        if self.has_gpu() and (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()):
            flags += ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=native"]  # this node's cards only: far quicker
        loop = asyncio.get_running_loop()
        with tempfile.TemporaryDirectory(prefix=".sdist-", dir=self._mkdir(self.dir / "llamacpp")) as tmp:
            progress(f"fetching llama-cpp-python{'==' + version if version else ''}'s source")
            tools = await self._pip_python()
            index = await self.index_for("llama-cpp-python")  # the mirror's, where it offers the sdist (bundles)
            try:
                tarball = await loop.run_in_executor(None, lambda: build.download_sdist(
                    Path(tmp), version or None, python=tools, pip_args=self._index_args(index)))
                progress(f"building llama-server from {tarball.name}"
                         f" ({'CUDA' if '-DGGML_CUDA=ON' in flags else 'CPU'}; cached by source hash)")
                binary = await loop.run_in_executor(None, lambda: build.build_llama_server(
                    tarball, cache=self.llama_cache, flags=flags, quiet=True))
            except build.BuildError as exc:
                raise InstallError(clean_output(str(exc).splitlines())) from None
        out = await _run([str(binary), "--version"], "llama-server --version")
        said = next((line.split(":", 1)[1].strip() for line in out if line.startswith("version:")), "")
        if not said:
            raise InstallError(f"the built llama-server does not say its version: {clean_output(out)}")
        final = self._mkdir(self.dir / "llamacpp" / ("b" + said.split()[0].lstrip("b")))
        target = final / build.BINARY
        tmp_target = final / f".{build.BINARY}.new"
        shutil.copy2(binary, tmp_target)
        os.replace(tmp_target, target)
        return said, str(target)

    async def _pip_python(self) -> str:
        """A Python with pip: this one when it has pip, else a tools environment under engines_dir."""
        try:
            await _run([self.python, "-m", "pip", "--version"], "pip --version")
            return self.python
        except InstallError:
            pass
        tools = self.dir / ".tools"
        if not (tools / "bin" / "python").exists():
            await _run([self.python, "-m", "venv", str(tools)], "python -m venv")
        return str(tools / "bin" / "python")

    @staticmethod
    def _mkdir(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return path


def _program(engine: str) -> str:
    return "trtllm-serve" if engine == "trtllm" else "python"


def _base_python() -> str:
    """The interpreter to make environments from: this one's base (not a venv's), as the agent runs it."""
    for candidate in (getattr(sys, "_base_executable", ""), sys.executable, shutil.which("python3") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return "python3"


def _pip_progress(progress: Progress) -> Callable[[str], None]:
    def on_line(line: str) -> None:
        text = _ANSI.sub("", line).strip()
        if text.startswith(("Collecting ", "Downloading ", "Installing collected packages", "Building wheel",
                            "Resolved ", "Prepared ", "Installed ", "+ ")):
            progress(text[:200])
    return on_line


async def _run(cmd: Sequence[str], what: str, *, progress: Callable[[str], None] | None = None) -> list[str]:
    """Run `cmd`, its output kept; InstallError with its last lines when it fails."""
    env = {**os.environ, "PIP_NO_INPUT": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    try:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, env=env)
    except OSError as exc:
        raise InstallError(f"{what}: {exc}") from None
    lines: deque[str] = deque(maxlen=400)
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        lines.append(line)
        if progress is not None:
            progress(line)
    code = await proc.wait()
    if code != 0:
        raise InstallError(clean_output(list(lines)) or f"{what} failed with code {code} and said nothing")
    return list(lines)
