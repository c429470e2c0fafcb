"""Whether a mirror is at an offline site: `MIRROR/_llmgw/offline.json`, set by `llmgw bundle import`.

While it is there, every command and API of this mirror that would fetch
from outside (`mirror add`, `check-updates`, `search`, the API's add and
search) is refused before any connection is made, with the reason naming
this file and the command that lifts it (`llmgw mirror offline off`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from llmgw.mirror.layout import utc_now, write_json_atomic

__all__ = ["MARKER", "offline_reason", "set_offline"]

MARKER = Path("_llmgw") / "offline.json"


def offline_reason(mirror_dir: str | os.PathLike[str]) -> str:
    """Why this mirror fetches nothing from outside; empty when it may fetch."""
    path = Path(mirror_dir) / MARKER
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ""
    except (OSError, ValueError):
        state = {"offline": True}  # unreadable: the safe reading is that the site is offline
    if not (isinstance(state, dict) and state.get("offline", True)):
        return ""
    return (f"this mirror is offline ({path}, since {state.get('since', '?')}); nothing is fetched from "
            "Hugging Face, GitHub, PyPI or any URL; `llmgw mirror offline off` allows it again")


def set_offline(mirror_dir: str | os.PathLike[str], on: bool, *, by: str) -> Path:
    path = Path(mirror_dir) / MARKER
    if on:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"offline": True, "since": utc_now(), "by": by})
    else:
        path.unlink(missing_ok=True)
    return path
