"""Fixtures for the agent's tests: supervisors in temporary state directories, engines always cleaned up.

Every engine a test starts runs in its own process group; whatever a test
leaves running is killed, by group, when it ends, so a failing test does not
leave processes behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

from llmgw.agent import procs
from llmgw.agent.supervisor import Supervisor


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
async def make_supervisor(state_dir: Path):
    """Supervisors on the test's state directory (a new one takes over from the last, as a new agent would)."""
    made: list[Supervisor] = []
    changes: list[tuple[str, str, str]] = []

    def make(**kw: Any) -> Supervisor:
        kw.setdefault("ring_size", 200)
        kw.setdefault("poll_interval", 0.05)
        kw.setdefault("ready_interval", 0.1)
        kw.setdefault("on_change", lambda s: changes.append((s.shard_id, s.state, s.message)))
        sup = Supervisor(kw.pop("path", state_dir), **kw)
        made.append(sup)
        return sup

    make.changes = changes  # type: ignore[attr-defined]
    yield make
    for sup in made:
        await sup.close()
        for shard in sup.shards():
            if shard.ident is not None:
                procs.signal_group(shard.ident, signal.SIGKILL)
                procs.reap(shard.ident.pid)


@pytest.fixture
def open_dir():
    """A folder others (the engine user) may pass through: pytest's own tmp_path is closed to them."""
    path = Path(tempfile.mkdtemp(prefix="llmgw-test-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)
