"""agent_advertise: the address agents and the other control planes are told for this control plane's agent port.

agent_listen is where the port is bound (often every interface); the address others are sent must be one they can
dial. It is the environment variable LLMGW_AGENT_ADVERTISE when that is set, so one set of pods sharing one
server.yaml (a Kubernetes StatefulSet) gives each its own, else server.yaml's agent_advertise, else agent_listen's
host or, for every interface, this machine's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from llmgw.hostnames import is_host

__all__ = ["ADVERTISE_ENV", "advertise_problem", "configured_advertise", "problems"]

ADVERTISE_ENV = "LLMGW_AGENT_ADVERTISE"


def advertise_problem(value: str) -> str | None:
    """Why `value` cannot be advertised (a sentence), or None: it must be HOST:PORT with a host others dial."""
    from llmgw.config.validate import split_address

    try:
        host, _ = split_address(value)
    except ValueError as exc:
        return f"{exc}; give the HOST:PORT agents dial, like cp1.example.com:7443"
    if host in ("", "0.0.0.0", "::"):
        return (f"{value!r} names no host; give the name or address agents and the other control planes dial, "
                "like cp1.example.com:7443")
    if not is_host(host):
        return f"{host!r} is neither an IP address nor a DNS name; give one agents dial, like cp1.example.com:7443"
    return None


def configured_advertise(config: Any, environ: Mapping[str, str] | None = None) -> str:
    """LLMGW_AGENT_ADVERTISE when set (and not empty), else agent_advertise; "" when neither says."""
    env = (os.environ if environ is None else environ).get(ADVERTISE_ENV, "").strip()
    return env or config.agent_advertise.strip()


def problems(config: Any, environ: Mapping[str, str] | None = None) -> list[tuple[tuple, str]]:
    """(path, sentence) for agent_advertise and the variable that stands in for it."""
    out: list[tuple[tuple, str]] = []
    if config.agent_advertise.strip():
        problem = advertise_problem(config.agent_advertise.strip())
        if problem:
            out.append((("agent_advertise",), problem))
    env = (os.environ if environ is None else environ).get(ADVERTISE_ENV, "").strip()
    if env:
        problem = advertise_problem(env)
        if problem:
            out.append((("agent_advertise",), f"environment variable {ADVERTISE_ENV} (used instead of "
                                              f"agent_advertise): {problem}; set it right or unset it"))
    return out
