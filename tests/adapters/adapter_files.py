"""Adapter files the sim engine loads."""

from __future__ import annotations

import json
from pathlib import Path


def sim_adapter(path: Path, answer_prefix: str) -> Path:
    """A file the sim engine loads as an adapter whose answers begin with `answer_prefix`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"answer_prefix": answer_prefix}))
    return path
