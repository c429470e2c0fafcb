"""Which inference engines this node has, where their programs are, and their versions.

An engine's program is looked for, in order:

1. under `engines_dir`: `ENGINES/<engine>/bin/<program>`, then `ENGINES/<engine>/<program>`
   (a Python engine's virtual environment has its `bin/python` there);
2. on the agent's PATH;
3. for llama.cpp only, a build the llama.cpp builder cached
   (`llmgw.agent.llamacpp_build`), or the one `LLMGW_LLAMA_SERVER` names.

The version comes from the engine plugin's `version(binary)`: None means
the engine is not installed here, and it is left out of Register.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from typing import Mapping

import attrs

from llmgw.plugins.types import Engine

__all__ = ["NodeEngines", "InstalledEngine", "PROGRAMS"]

log = logging.getLogger("llmgw.agent.engines")

#: The program each engine's plan runs (`spec.binary` replaces it). The sim engine is llmgw itself.
PROGRAMS: Mapping[str, str] = {
    "llamacpp": "llama-server",
    "vllm": "python3",
    "sglang": "python3",
    "trtllm": "trtllm-serve",
}


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
        self._versions: dict[str, str | None] | None = None

    def get(self, name: str) -> Engine | None:
        return self.engines.get(name)

    def binary(self, name: str) -> str | None:
        """The program to run for engine `name`, or None to let its plugin choose (the sim engine, or not found)."""
        program = PROGRAMS.get(name)
        if program is None:
            return None
        for candidate in (self.dir / name / "bin" / program, self.dir / name / program):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        if name == "llamacpp":
            override = os.environ.get("LLMGW_LLAMA_SERVER")
            if override and os.access(override, os.X_OK):
                return override
        found = shutil.which(program, path=self._path)
        if found:
            return found
        if name == "llamacpp":
            from llmgw.agent.llamacpp_build import find_cached

            cached = find_cached(self._llama_cache)
            if cached is not None:
                return str(cached)
        return None

    def installed(self) -> list[InstalledEngine]:
        """Every engine plugin, with its version here (blocking: run it in an executor)."""
        out = []
        for name, engine in sorted(self.engines.items()):
            binary = self.binary(name)
            try:
                version = engine.version(binary) if (binary or name not in PROGRAMS) else None
            except Exception as exc:  # a plugin's bug must not stop the agent
                log.warning("engine %s: version() failed: %s", name, exc)
                version = None
            out.append(InstalledEngine(name=name, version=version, binary=binary, description=engine.description))
        return out

    async def versions(self, *, refresh: bool = False) -> dict[str, str]:
        """Engine name -> version, for the engines installed here; probed once, then remembered."""
        if self._versions is None or refresh:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(None, self.installed)
            self._versions = {e.name: e.version for e in found}
        return {k: v for k, v in self._versions.items() if v}
