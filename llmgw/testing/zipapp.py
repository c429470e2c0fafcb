"""dist/llmgw.pyz for tests that run the one file: built when missing or older than the tree it comes from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYZ = ROOT / "dist" / "llmgw.pyz"
SOURCES = ("llmgw", "plugins", "docs", "setup.cfg", "constraints.txt", "build.py", "zipapp_boot.py")


def newest_source(root: Path = ROOT) -> float:
    """The newest modification time among the files the zipapp is built from."""
    newest = 0.0
    for name in SOURCES:
        path = root / name
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for f in path.rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts and ".egg-info" not in str(f):
                    newest = max(newest, f.stat().st_mtime)
    return newest


def fresh_pyz(root: Path = ROOT) -> Path:
    """The zipapp, (re)built with `python3 build.py` unless it is newer than every source file."""
    pyz = root / "dist" / "llmgw.pyz"
    if not pyz.is_file() or pyz.stat().st_mtime < newest_source(root):
        done = subprocess.run([sys.executable, str(root / "build.py")], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"build.py failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return pyz
