"""The real clients, installed where the suite keeps them: a Python environment of client libraries and
an npm folder of Node clients, each made once and reused while its pins stay the same.

The folder is $LLMGW_CLIENTS_CACHE, else .cache/clients at the repository's root (CI keeps it
between runs). Each environment is made in a folder named by a digest of its pins, so changing
a pin makes a new one; a half-made one (no `ready` file) is made again.

Run as a script (`python tests/clients/environments.py`) to make both ahead of the tests.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent

#: The Python client libraries, pinned (pip index versions NAME): LangChain's two chat models, LiteLLM.
PYTHON_CLIENTS = ("langchain-openai==1.7.4", "langchain-anthropic==1.7.10", "litellm==1.110.2")
#: The Node clients, pinned (npm view NAME version): OpenAI's SDK, Claude Code, Codex CLI.
NODE_CLIENTS = ("openai@7.59.0", "@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0")


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("LLMGW_CLIENTS_CACHE") or ROOT / ".cache" / "clients")


def _digest(pins: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]


def python_env() -> pathlib.Path:
    """A virtual environment holding PYTHON_CLIENTS; its python executable."""
    where = cache_dir() / f"python-{sys.version_info.major}.{sys.version_info.minor}-{_digest(PYTHON_CLIENTS)}"
    python = where / "bin" / "python"
    if (where / "ready").exists():
        return python
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PYTHON_CLIENTS],
                   check=True, timeout=900)
    (where / "ready").write_text("\n".join(PYTHON_CLIENTS) + "\n")
    return python


def node_dir() -> pathlib.Path:
    """An npm folder holding NODE_CLIENTS (its node_modules/.bin has claude and codex)."""
    where = cache_dir() / f"node-{_digest(NODE_CLIENTS)}"
    if (where / "ready").exists():
        return where
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not installed: apt-get install nodejs npm")
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    (where / "package.json").write_text('{"name": "llmgw-client-suite", "private": true}\n')
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *NODE_CLIENTS],
                   cwd=where, check=True, timeout=900)
    (where / "ready").write_text("\n".join(NODE_CLIENTS) + "\n")
    return where


if __name__ == "__main__":
    print(python_env())
    print(node_dir())
