"""The serving path is a line of stages that know nothing of each other (llmgw.router.stages)."""

from __future__ import annotations

import ast
from pathlib import Path

import llmgw.router.stages as stages_pkg
from llmgw.router.stages import STAGES

STAGES_DIR = Path(stages_pkg.__file__).parent


def test_the_stages_run_in_the_documented_order():
    assert [s.name for s in STAGES] == ["accounting", "auth", "threads", "limits", "guard", "cache", "kept",
                                        "admission", "engine"]
    assert all(callable(s.enter) and callable(s.leave) for s in STAGES)


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_no_stage_imports_another():
    for path in sorted(STAGES_DIR.glob("*.py")):
        if path.name in ("__init__.py", "base.py"):
            continue
        others = {m for m in _imports(path) if m.startswith("llmgw.router.stages") and m != "llmgw.router.stages.base"}
        assert not others, f"{path.name} imports {others}: what stages share is on the Turn, or in base"


def test_the_router_does_not_reach_up_into_the_server():
    router = STAGES_DIR.parent
    for path in sorted(router.rglob("*.py")):
        server = {m for m in _imports(path) if m == "llmgw.server" or m.startswith("llmgw.server.")}
        assert not server, f"{path.relative_to(router)} imports {server}: what a handler needs is passed in"
