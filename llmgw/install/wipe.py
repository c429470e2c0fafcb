"""`llmgw wipe`: take llmgw off a machine: its services, the engines its agent left, its files, user and firewall table.

On a node, the control plane is told first (llmgw/nodes/leave.py): it
forgets the node, places its replicas elsewhere and revokes the node's
certificate. Only what llmgw made goes: the folders and files in
installed.json (see manifest.py), units that carry llmgw's first line, the nft file that carries
its header, the table `inet llmgw`, and the user init added. A folder that
was there before llmgw (a shared /etc/nftables.d, say) stays.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import attrs

from llmgw.install import firewall
from llmgw.install.layout import ROLES, Layout
from llmgw.install.manifest import Manifest
from llmgw.install.service import MARKER, remove_service
from llmgw.nodes.leave import Leaving, leaving, tell_leaving

__all__ = ["WipePlan", "plan_wipe", "carry_out"]

ENGINE_USER = "llmgw-engine"


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@attrs.frozen
class WipePlan:
    layout: Layout
    roles: tuple[str, ...]
    engines: tuple[int, ...]  #: engine pids the agent left running
    dirs: tuple[Path, ...]
    files: tuple[Path, ...]
    parents: tuple[Path, ...]
    users: tuple[str, ...]  #: system users llmgw made
    table: bool  #: the table inet llmgw is applied here
    manifest_found: bool
    leaving: Leaving | None = None  #: this machine is a node: its control plane is told it leaves

    @property
    def empty(self) -> bool:
        return not (self.roles or self.engines or self.dirs or self.files or self.users or self.table)

    def lines(self) -> list[str]:
        """What will go, one line each, for the operator to read before confirming."""
        out = []
        if self.leaving is not None:
            out.append(f"node {self.leaving.node} from the cluster: its control plane "
                       f"({', '.join(self.leaving.control_planes)}) forgets it and revokes its certificate")
        out += [f"service llmgw-{r} (stopped, its unit {self.layout.unit(r)} removed)" for r in self.roles]
        out += [f"engine process {pid}, left running by the agent" for pid in self.engines]
        out += [f"{d}/ and everything in it" for d in self.dirs]
        out += [str(f) for f in self.files if not any(str(f).endswith(f"llmgw-{r}.service") for r in self.roles)]
        if self.table:
            out.append(f"the firewall table {firewall.TABLE}")
        out += [f"the user {u}" for u in self.users]
        return out


def _ours(path: Path, first_line: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n") == first_line
    except OSError:
        return False


def _engine_pids(layout: Layout) -> list[int]:
    """Engines recorded by the agent (STATE/shards/*.json) whose process still runs."""
    state_dir = layout.state / "agent"
    try:
        from llmgw.config import load_agent_config

        state_dir = Path(load_agent_config(layout.agent_yaml).state_dir)
    except Exception:  # no agent.yaml, or one that no longer loads: the default place
        pass
    pids: list[int] = []
    for record in sorted((state_dir / "shards").glob("*.json")):
        try:
            pid = int(json.loads(record.read_text()).get("pid") or 0)
        except (OSError, ValueError, AttributeError):
            continue
        if pid > 1 and Path(f"/proc/{pid}").exists():
            pids.append(pid)
    return pids


def plan_wipe(layout: Layout) -> WipePlan:
    manifest = Manifest.load(layout)
    roles = [r for r in manifest.units if layout.unit(r).exists() and _ours(layout.unit(r), MARKER)]
    roles += [r for r in ROLES if r not in roles and _ours(layout.unit(r), MARKER)]
    files = [Path(f) for f in manifest.files if Path(f).exists()]
    if _ours(layout.nft, firewall.HEADER) and layout.nft not in files:
        files.append(layout.nft)
    dirs = [Path(d) for d in manifest.dirs if Path(d).exists()]
    table = layout.system and (manifest.firewall or firewall.table_applied())
    users = [manifest.user] if manifest.user else []
    if layout.system and manifest.exists and _user_exists(ENGINE_USER):
        users.append(ENGINE_USER)  # made by the agent on its first engine start
    return WipePlan(
        layout=layout, roles=tuple(roles), engines=tuple(_engine_pids(layout)), dirs=tuple(dirs),
        files=tuple(files), parents=tuple(Path(p) for p in manifest.parents), users=tuple(users),
        table=bool(table), manifest_found=manifest.exists, leaving=leaving(layout),
    )


def _stop_engines(pids: tuple[int, ...]) -> list[str]:
    said = []
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)  # an engine leads a session (and group) of its own
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
    deadline = time.monotonic() + 15
    for pid in pids:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _zombie(pid):
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists() and not _zombie(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            said.append(f"engine {pid}: killed (it did not stop within 15 s)")
        else:
            said.append(f"engine {pid}: stopped")
    return said


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].startswith("Z")


def carry_out(plan: WipePlan) -> list[str]:
    """Stop, then remove, in that order; one sentence per thing."""
    said: list[str] = []
    if plan.leaving is not None:  # while the agent and its certificate are still here
        said.append(tell_leaving(plan.leaving)[1])
    # The agent first, so it starts no engine while they are stopped; then the rest.
    for role in sorted(plan.roles, key=lambda r: r != "agent"):
        said.append(remove_service(plan.layout, role))
    said += _stop_engines(plan.engines)
    if plan.table:
        try:
            if firewall.remove_table():
                said.append(f"firewall: table {firewall.TABLE} deleted")
        except firewall.FirewallError as exc:
            said.append(f"firewall: {exc}")
    for f in plan.files:
        try:
            f.unlink()
            said.append(f"{f}: removed")
        except FileNotFoundError:
            pass
    for d in plan.dirs:
        shutil.rmtree(d, ignore_errors=True)
        said.append(f"{d}: removed" if not d.exists() else f"{d}: could not be removed whole; look inside")
    for p in sorted(plan.parents, key=lambda p: len(p.parts), reverse=True):
        try:
            p.rmdir()  # only when empty: something else may have put files there since
        except OSError:
            pass
    plan.layout.manifest.unlink(missing_ok=True)
    for user in plan.users:
        done = subprocess.run(["userdel", user], capture_output=True, text=True, timeout=60)
        said.append(f"user {user}: removed" if done.returncode == 0
                    else f"user {user}: userdel failed: {done.stderr.strip()}")
    return said
