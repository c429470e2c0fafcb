"""What the engine endpoints read and answer: each node's engines, and an install asked for."""

from __future__ import annotations

import attrs

from llmgw.admin.fields import field

#: Where an engine stands on a node, as GET /engines says it.
ENGINE_STATES = ("installed", "queued", "installing", "failed")


@attrs.frozen(kw_only=True)
class EngineQuery:
    """Which nodes' engines to list."""

    node: str | None = field("Only this node's engines.", None)


@attrs.frozen(kw_only=True)
class EngineRow:
    """One engine on one node: an installation (each version apart), or one being installed or that failed."""

    node: str = field("The node's id.")
    engine: str = field("The engine: vllm, sglang, trtllm, llamacpp, sim, or a plugin's.")
    version: str = field("Its version; while installing, the version asked for (empty: the newest the index "
                         "offers).", "")
    state: str = field("installed; queued or installing (the node is installing it: `step` says what it does "
                       "now); or failed (`error` has the installer's own words).", "installed")
    step: str = field("What the installation is doing now, or how it ended.", "")
    error: str = field("With failed: the installer's last lines (pip's, cmake's).", "")
    path: str = field("Where it is on the node: its program, or its environment's python.", "")
    default: bool = field("Whether a model that pins no engine_version runs this one there.", False)
    job: str = field("The job following the installation (`llmgw ctl jobs ID`); empty for one found installed.",
                     "")
    by: str = field("Who asked for the installation: an operator, or the control plane for a model.", "")


@attrs.frozen(kw_only=True)
class EngineList:
    """Every node's engines."""

    engines: list[EngineRow] = field("By node, then engine; installations before what is being installed.",
                                     factory=list)


@attrs.frozen(kw_only=True)
class EngineInstallRequest:
    """An engine for a node to install."""

    engine: str = field("The engine: one its agent can install (vllm, sglang, trtllm, llamacpp).")
    version: str = field("The version, like 0.9.1; empty installs the newest the index offers.", "")


@attrs.frozen(kw_only=True)
class EngineInstallStarted:
    """An installation asked for: follow its job until it ends."""

    node: str = field("The node installing it.")
    engine: str = field("The engine.")
    version: str = field("The version asked for; empty: the newest the index offers.", "")
    job: str = field("The job following it: GET /jobs/{job}, `llmgw ctl jobs ID`.")
    state: str = field("queued: the node is told at the control plane's next pass.", "queued")
