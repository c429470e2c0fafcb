"""Which inference engines this node has, where their programs are, and their versions.

An engine's program is looked for, in order:

1. under `engines_dir`, one installation per version, as the agent's
   installer makes them (`llmgw.agent.engine_install`):
   `ENGINES/<engine>/<version>/bin/<program>` (a Python engine's virtual
   environment: its `bin/python`, or `bin/trtllm-serve`), or
   `ENGINES/<engine>/<version>/<program>` (a llama.cpp build);
2. under `engines_dir` as an operator may lay one out by hand:
   `ENGINES/<engine>/bin/<program>`, then `ENGINES/<engine>/<program>`;
3. for llama.cpp, the one `LLMGW_LLAMA_SERVER` names;
4. on the agent's PATH;
5. for llama.cpp only, a build the llama.cpp builder cached
   (`llmgw.agent.llamacpp_build`).

Each program's version comes from the engine plugin's `version(binary)`:
vLLM, SGLang and TensorRT-LLM read it from their environment's package
metadata, llama.cpp from `llama-server --version`. None means the engine
is not installed there. Register carries every installation (each version
apart) and, per engine, the one a StartShard naming no version gets: the
first found in the order above, so an installation under `engines_dir`
wins over PATH.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

import attrs

from llmgw.plugins.types import Engine

__all__ = ["NodeEngines", "InstalledEngine", "PROGRAMS", "version_key"]

log = logging.getLogger("llmgw.agent.engines")

#: The program each engine's plan runs (`spec.binary` replaces it). The sim engine is llmgw itself.
PROGRAMS: Mapping[str, str] = {
    "llamacpp": "llama-server",
    "vllm": "python3",
    "sglang": "python3",
    "trtllm": "trtllm-serve",
}
#: What a virtual environment calls its Python besides python3.
_VENV_PYTHONS = ("python3", "python")


def version_key(version: str) -> tuple:
    """Orders versions as numbers where they are numbers: 0.10.0 after 0.9.1, b6000 after b999."""
    parts = re.findall(r"\d+|[A-Za-z]+", version)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


@attrs.frozen
class InstalledEngine:
    name: str
    version: str | None  #: None: not installed here
    binary: str | None  #: the program's path, when one was found
    description: str = ""


class NodeEngines:
    """The engine plugins, as this node can run them."""

    def __init__(self, engines: Mapping[str, Engine], engines_dir: str | os.PathLike[str], *,
                 path: str | None = None, llama_cache: str | None = None) -> None:
        self.engines = dict(engines)
        self.dir = Path(engines_dir)
        self._path = path
        self._llama_cache = llama_cache
        self._found: list[InstalledEngine] | None = None

    def get(self, name: str) -> Engine | None:
        return self.engines.get(name)

    # ------------------------------------------------------------------ programs

    def candidates(self, name: str) -> list[str]:
        """Every program of engine `name` on this node, in the order they are preferred."""
        program = PROGRAMS.get(name)
        if program is None:
            return []
        names = _VENV_PYTHONS if program == "python3" else (program,)
        out: list[str] = []
        root = self.dir / name
        versions = sorted((d for d in _dirs(root) if not d.name.startswith(".") and d.name not in ("bin",)),
                          key=lambda d: version_key(d.name), reverse=True)
        for base in [*versions, root]:
            for sub in ("bin", ""):
                found = next((str(base / sub / p) for p in names if _runnable(base / sub / p)), None)
                if found:
                    out.append(found)
                    break
        if name == "llamacpp":
            override = os.environ.get("LLMGW_LLAMA_SERVER")
            if override and os.access(override, os.X_OK):
                out.append(override)
        on_path = shutil.which(program, path=self._path)
        if on_path:
            out.append(on_path)
        if name == "llamacpp":
            from llmgw.agent.llamacpp_build import find_cached

            cached = find_cached(self._llama_cache)
            if cached is not None:
                out.append(str(cached))
        return list(dict.fromkeys(out))

    def binary(self, name: str, version: str = "") -> str | None:
        """The program to run for engine `name` (at `version`, when given and found), or None to let its
        plugin choose (the sim engine, or nothing found)."""
        if version and self._found is not None:
            exact = next((e.binary for e in self._found if e.name == name and e.version == version), None)
            if exact:
                return exact
        found = self.candidates(name)
        if not found:
            return None
        if self._found is not None:  # the first that has a version, as Register said
            with_version = [e.binary for e in self._found if e.name == name and e.version and e.binary]
            if with_version and with_version[0] in found:
                return with_version[0]
        return found[0]

    # ------------------------------------------------------------------ versions

    def installed(self) -> list[InstalledEngine]:
        """Every engine plugin with each version found here; one entry with version None for a plugin
        with none (blocking: run it in an executor)."""
        out = []
        for name, engine in sorted(self.engines.items()):
            if name not in PROGRAMS:  # runs llmgw itself (the sim engine)
                out.append(InstalledEngine(name=name, version=self._ask(engine, None), binary=None,
                                           description=engine.description))
                continue
            seen: set[str] = set()
            for binary in self.candidates(name):
                version = self._ask(engine, binary)
                if version and version not in seen:
                    seen.add(version)
                    out.append(InstalledEngine(name=name, version=version, binary=binary,
                                               description=engine.description))
            if not seen:
                out.append(InstalledEngine(name=name, version=None, binary=None, description=engine.description))
        return out

    @staticmethod
    def _ask(engine: Engine, binary: str | None) -> str | None:
        try:
            return engine.version(binary)
        except Exception as exc:  # a plugin's bug must not stop the agent
            log.warning("engine %s: version() failed: %s", engine.name, exc)
            return None

    async def scan(self, *, refresh: bool = False) -> list[InstalledEngine]:
        """Every installation with a version (probed once, then remembered until `refresh`)."""
        if self._found is None or refresh:
            loop = asyncio.get_running_loop()
            self._found = await loop.run_in_executor(None, self.installed)
        return [e for e in self._found if e.version]

    async def versions(self, *, refresh: bool = False) -> dict[str, str]:
        """Engine name -> the version a StartShard naming none gets, for the engines installed here."""
        out: dict[str, str] = {}
        for e in await self.scan(refresh=refresh):
            out.setdefault(e.name, e.version or "")
        return out


def _dirs(root: Path) -> list[Path]:
    try:
        return [d for d in root.iterdir() if d.is_dir()]
    except OSError:
        return []


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
