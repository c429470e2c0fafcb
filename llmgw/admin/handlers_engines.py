"""Handlers of the engine endpoints: every node's engines, and an engine for a node to install."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.engine_types import EngineInstallStarted, EngineList

__all__ = ["install_engine", "list_engines"]


async def list_engines(call: Call) -> EngineList:
    """Every node's engines: each installation with its version and where it is (the one a model pinning no
    engine_version runs marked default), and each being installed (with what it does now) or that failed to
    install (in the installer's words)."""
    return EngineList(engines=await call.admin.need_cluster().engines(node=call.query.node))


async def install_engine(call: Call) -> EngineInstallStarted:
    """Have the node's agent install an engine (at a version, else the newest its package index offers), into
    an environment of its own under its engines_dir. Answers at once with the job that follows it; the node
    advertises the engine once it is installed. A failure recorded for that engine there is forgotten."""
    body = call.body
    return await call.admin.need_cluster().install_engine(call.params["node"], body.engine.strip(),
                                                          body.version.strip(), actor=call.actor)
