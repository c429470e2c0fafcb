"""What this llmgw is: version, commit, and the Python and platform it was built for.

`build.py` writes `_buildinfo.json` beside this module before packing the
zipapp; a source checkout has none and asks git instead.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from importlib import resources

from llmgw import __version__


@functools.cache
def build_info() -> dict[str, str]:
    info = {"version": __version__, "commit": "unknown", "built_python": "", "built_platform": "", "built_at": ""}
    try:
        data = resources.files("llmgw").joinpath("_buildinfo.json").read_text()
        info.update(json.loads(data))
    except (FileNotFoundError, OSError, ValueError):
        info["commit"] = _git_commit() or "unknown"
        info["built_python"] = "(source checkout)"
    info["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    info["platform"] = f"{sys.platform}-{platform.machine()}"
    return info


def _git_commit() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def zipapp_path() -> str | None:
    """The .pyz this process runs from, or None when running from source."""
    path = sys.argv[0] if sys.argv else ""
    if path.endswith(".pyz") and os.path.isfile(path):
        return os.path.abspath(path)
    env = os.environ.get("LLMGW_PYZ")
    return env if env and os.path.isfile(env) else None


def self_command() -> list[str]:
    """The argv prefix that runs this same llmgw in a child process."""
    pyz = zipapp_path()
    if pyz:
        return [sys.executable, pyz]
    return [sys.executable, "-m", "llmgw"]
