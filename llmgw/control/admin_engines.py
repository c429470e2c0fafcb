"""The engine endpoints of `AdminCluster` (admin_cluster.py): each node's engines, and an install asked for.

What a node has comes from its agent (Register, and every EngineStatus
that ends an installation); what it is installing, and what failed, from
the reconciler's `engine_states` (engine_provisioning.py). An install asked
for here is followed by a job (jobs.py, kind `engine`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llmgw.admin.cluster_api import ClusterConflict, ClusterInvalid, ClusterNotFound
from llmgw.admin.engine_types import EngineInstallStarted, EngineRow
from llmgw.control.engine_provisioning import ENDED, installs_of

if TYPE_CHECKING:
    from llmgw.control.service import ControlPlane

__all__ = ["AdminEngines"]

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")


class AdminEngines:
    """A mixin of AdminCluster: it brings `_leader()`."""

    def _leader(self) -> ControlPlane:  # pragma: no cover - AdminCluster's
        raise NotImplementedError

    async def engines(self, *, node: str | None) -> list[EngineRow]:
        plane = self._leader()
        states = plane.reconciler.engine_states
        if node is not None and plane.inventory.get(node) is None:
            raise ClusterNotFound(f"no node called {node!r} is known; `llmgw ctl nodes` lists them")
        rows: list[EngineRow] = []
        for n in sorted(plane.inventory.nodes(), key=lambda n: n.id):
            if node is not None and n.id != node:
                continue
            mine = states.get(n.id, {})
            defaults = set()
            for inst in installs_of(n):
                state = mine.get(inst["engine"])
                asked = state is not None and state.state == "installed" and state.version == inst["version"]
                default = n.engines.get(inst["engine"]) == inst["version"] and inst["engine"] not in defaults
                if default:
                    defaults.add(inst["engine"])
                rows.append(EngineRow(node=n.id, engine=inst["engine"], version=inst["version"], path=inst["path"],
                                      default=default, job=state.job if asked else "",
                                      by=state.by if asked else "", step=state.step if asked else ""))
            for engine, state in sorted(mine.items()):
                if state.state == "installed":
                    continue
                rows.append(EngineRow(node=n.id, engine=engine, version=state.version, state=state.state,
                                      step=state.step, error=state.error, job=state.job, by=state.by))
        return rows

    async def install_engine(self, node_id: str, engine: str, version: str, *, actor: str) -> EngineInstallStarted:
        plane = self._leader()
        node = plane.inventory.get(node_id)
        if node is None:
            raise ClusterNotFound(f"no node called {node_id!r} is known; `llmgw ctl nodes` lists them")
        if version and not _VERSION.match(version):
            raise ClusterInvalid(f"version: {version!r} is not a version (like 0.9.1): letters, digits and "
                                 f". + ! _ - only")
        if engine not in node.installable:
            can = ", ".join(node.installable) or "none"
            raise ClusterInvalid(f"engine: {node_id}'s agent cannot install {engine!r} (it installs: {can}); "
                                 f"install it under the node's engines_dir by hand")
        if not node.connected:
            raise ClusterConflict(f"{node_id}'s agent is not connected ({node.state()}); ask again once it is")
        state = plane.reconciler.engine_states.get(node_id, {}).get(engine)
        if state is not None and state.state not in ENDED:
            raise ClusterConflict(f"{node_id} is installing {engine} {state.version or ''} now".replace("  ", " ")
                                  + (f": llmgw ctl jobs {state.job} follows it" if state.job else ""))
        state = plane.reconciler.install_engine(node_id, engine, version, by=actor)
        return EngineInstallStarted(node=node_id, engine=engine, version=version, job=state.job, state=state.state)
