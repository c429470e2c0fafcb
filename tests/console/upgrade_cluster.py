"""A real leading control plane behind the admin API, for Do → Upgrade the cluster: a mirror's file server holding
release NEW signed with a key made here (trusted by server.yaml) and 9.9.9 signed by a stranger's, and two
scripted agents on the real agent port that take an Upgrade as a real one would (tests/upgrade/test_upgrade_job.py;
a real agent's replacement is tests/upgrade/test_upgrade_e2e_slow.py's)."""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "upgrade"))

from test_upgrade_job import NEW, OLD, ScriptedAgent  # noqa: E402
from upgrade_helpers import free_port, make_key, release_folder  # noqa: E402

from llmgw.admin.testing import LiveAdmin  # noqa: E402
from llmgw.config.load import parse_server_config  # noqa: E402
from llmgw.control.admin_cluster import AdminCluster  # noqa: E402
from llmgw.control.service import ControlPlane, ControlPlaneSlot  # noqa: E402
from llmgw.mirror.layout import Layout  # noqa: E402
from llmgw.mirror.serve import build_file_app  # noqa: E402
from llmgw.release.store import add_release  # noqa: E402
from llmgw.router.replicas import ReplicaSet  # noqa: E402

__all__ = ["NEW", "OLD", "STRANGER", "UpgradeCluster"]

STRANGER = "9.9.9"


class UpgradeCluster:
    """The admin API (LiveAdmin, its own thread and loop) over a ControlPlane on that loop, with the mirror and
    the agents (node-a in rack r1, node-b in rack r2) on it too."""

    def __init__(self, tmp: Path, *, silent: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.silent = silent  #: nodes whose agent takes the Upgrade and never comes back
        private, trust, public = make_key(tmp / "keys")
        stranger, stranger_trust, _ = make_key(tmp / "stranger")
        self.mirror_dir = tmp / "mirror"
        self.mirror_dir.mkdir()
        add_release(self.mirror_dir, release_folder(tmp / "rel", NEW, private), trust)
        add_release(self.mirror_dir, release_folder(tmp / "bad", STRANGER, stranger), stranger_trust)
        self.mirror_port, agent_port = free_port(), free_port()
        self.agent_url = f"127.0.0.1:{agent_port}"
        self.config = parse_server_config({
            "agent_listen": self.agent_url, "agent_insecure": True,
            "control": {"lease_ttl": "5s", "reconcile_interval": "200ms"},  # 5 s: a loaded machine keeps its lease
            "mirror": {"url": f"http://127.0.0.1:{self.mirror_port}"}, "releases": {"trusted_keys": [public]}})
        self.slot = ControlPlaneSlot()
        self.live = LiveAdmin(tmp, cluster=AdminCluster(self.slot), config=self.config)
        self.agents: list[ScriptedAgent] = []

    def __enter__(self) -> UpgradeCluster:
        self.live.__enter__()
        try:
            self.live.run(self._start())
        except BaseException:
            self.live.__exit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        import asyncio

        self.mirror = web.AppRunner(build_file_app(Layout(self.mirror_dir)))
        await self.mirror.setup()
        await web.TCPSite(self.mirror, "127.0.0.1", self.mirror_port).start()
        self.plane = ControlPlane(self.config, self.live.store, ReplicaSet(), holder="cp-1", heartbeat_interval=0.2)
        await self.plane.start()
        self.slot.plane = self.plane
        assert await self.plane.leadership.wait_leading(5)
        self.agents += [ScriptedAgent(self.agent_url, "node-a", rack="r1", silent="node-a" in self.silent),
                        ScriptedAgent(self.agent_url, "node-b", rack="r2", silent="node-b" in self.silent)]
        for _ in range(200):
            if all(self.plane.endpoint.sessions.get(a.node) is not None for a in self.agents):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the agents did not register")

    def __exit__(self, *exc: object) -> None:
        try:
            self.live.run(self._stop())
        finally:
            self.live.__exit__(*exc)

    async def _stop(self) -> None:
        for a in self.agents:
            await a.stop()
        await self.plane.stop()
        await self.mirror.cleanup()

    def standby(self) -> Standby:
        """A second control plane on the same store (its own admin API), a standby while cp-1 leads."""
        return Standby(self)

    def versions(self) -> dict[str, str]:
        return {a.node: a.version for a in self.agents}

    def upgrade_jobs(self) -> list[dict]:
        """The jobs of kind upgrade, as the admin API lists them."""
        import json
        import urllib.request

        req = urllib.request.Request(self.live.url + "/api/v1/jobs", headers=self.live.headers())
        with urllib.request.urlopen(req, timeout=10) as r:
            return [j for j in json.load(r)["jobs"] if j["kind"] == "upgrade"]

    def start_upgrade(self, body: dict) -> dict:
        """POST /upgrade as `llmgw ctl upgrade` sends it: the job."""
        import json
        import urllib.request

        req = urllib.request.Request(self.live.url + "/api/v1/upgrade", data=json.dumps(body).encode(),
                                     method="POST", headers=self.live.headers())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def audited(self, action: str) -> list:
        return [e for e in self.live.run(self.live.store.list_audit(limit=1000)) if e.action == action]


class Standby:
    """cp-2: the admin API over a control plane that shares the leader's SQLite store and does not lead."""

    def __init__(self, cluster: UpgradeCluster) -> None:
        self.config = parse_server_config({
            "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True, "control": {"lease_ttl": "5s"},
            "mirror": {"url": cluster.config.mirror.url}})
        self.slot = ControlPlaneSlot()
        self.live = LiveAdmin(cluster.tmp, cluster=AdminCluster(self.slot), config=self.config)  # the same store

    def __enter__(self) -> Standby:
        self.live.__enter__()
        try:
            self.live.run(self._start())
        except BaseException:
            self.live.__exit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        import asyncio

        self.plane = ControlPlane(self.config, self.live.store, ReplicaSet(), holder="cp-2", standby_hold=0.1)
        await self.plane.start()
        self.slot.plane = self.plane
        await asyncio.sleep(0.3)
        assert not self.plane.leading

    def __exit__(self, *exc: object) -> None:
        try:
            self.live.run(self.plane.stop())
        finally:
            self.live.__exit__(*exc)
