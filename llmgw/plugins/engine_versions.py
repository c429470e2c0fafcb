"""Versions of engines installed as Python packages (vLLM, SGLang, TensorRT-LLM), read without importing them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["dist_version"]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_version(program: str | os.PathLike[str] | None, *dists: str) -> str | None:
    """The version of the first of `dists` installed in `program`'s Python environment, or None.

    `program` is the environment's `bin/python` or a console script beside it.
    The version is read from the package's `*.dist-info/METADATA` in the
    environment's site-packages, as `importlib.metadata` would, without
    importing the engine (vLLM takes seconds and a GPU library to import).
    A `program` outside any environment (a system `python3`) is asked with
    `importlib.metadata`, which imports nothing of the engine either.
    """
    if not program:
        return None
    prefix = Path(program).parent.parent  # not resolved: a venv's python is a link out of it
    sites = [*prefix.glob("lib/python*/site-packages"), *prefix.glob("lib64/python*/site-packages")]
    if sites:
        for want in (_normalized(d) for d in dists):
            for site in sites:
                for info in sorted(site.glob("*.dist-info")):
                    name = info.name[: -len(".dist-info")].partition("-")[0]
                    if _normalized(name) == want and (version := _metadata_version(info / "METADATA")):
                        return version
        return None
    if Path(program).name.startswith("python"):
        code = ("import importlib.metadata as m, sys\n"
                "for d in sys.argv[1:]:\n"
                "    try:\n"
                "        print(m.version(d)); break\n"
                "    except m.PackageNotFoundError:\n"
                "        pass\n")
        try:
            out = subprocess.run([str(program), "-I", "-c", code, *dists], capture_output=True, text=True,
                                 timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = out.stdout.strip().splitlines()
        return lines[0].strip() if out.returncode == 0 and lines else None
    return None


def _metadata_version(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the headers end at the first blank line
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None
