"""Helpers the agent's tests share: plans for the stand-in engine and the sim engine, free ports."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from llmgw.agent import procs
from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import LaunchPlan, LaunchSpec

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")
KEY = "test-engine-key-0123456789"

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_plan(port: int, *flags: str, key: str = KEY, env: dict[str, str] | None = None) -> LaunchPlan:
    """The stand-in engine's plan: key by environment, as the real plugins give it."""
    return LaunchPlan(argv=[sys.executable, str(FAKE_ENGINE), str(port), *flags],
                      env={"ENGINE_KEY": key, **(env or {})}, ready_path="/health", metrics_path="/metrics")


def sim_plan(port: int, model: str = "tiny-sim", key: str = KEY) -> LaunchPlan:
    """The real sim engine's plan, from its plugin."""
    engine = load_plugins().engines()["sim"]
    return engine.plan(LaunchSpec(model=model, weights="", host="127.0.0.1", port=port, api_key=key))



def kill_pid(pid: int) -> None:
    """Kill a process group this test started itself, and wait until it is dead (reaped when it is our child)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stat = procs.proc_stat(pid)
        if stat is None or stat.state in ("Z", "X"):
            break
        time.sleep(0.01)
