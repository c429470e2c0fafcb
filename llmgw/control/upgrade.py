"""`llmgw ctl upgrade RELEASE`: every node's agent moved to a signed release, one node (or rack) at a time, as a job.

    job = await plane.upgrades.start({"release": "0.2.0", "by": "node"}, actor="alice")

The leader drives it (kind `upgrade`):

1. **the release**: its SHA256SUMS on the mirror's file server
   (`mirror.url`, `_llmgw/releases/RELEASE/`, put there by `llmgw mirror
   release add`, which checked every file) must be signed by a key
   server.yaml's `releases` trusts, and list a zipapp for each node's
   machine. Refused before anything is sent otherwise: nothing changes.
2. **the control planes**: named with the version each runs; they are
   upgraded per machine, before the agents (docs/upgrades.md), since an
   agent newer than its control plane is refused at Register.
3. **the agents**, one node at a time (`by: rack`: every node of one
   `llmgw.io/rack` at once): each is sent `Upgrade`, checks its zipapp
   against the signed sums with its own trusted keys, puts it in place,
   re-execs and registers again; the next goes once it is back with the
   new version and the same engines (same pids). A node already on the
   release is passed over.

The first failure stops the job in words (which node, why, which are done
and which were not tried); with `rollback` the ones done are sent back to
the file they ran before. `back` sends every node back (each agent swaps
its program with the file kept from before its last upgrade).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import attrs

from llmgw import __version__
from llmgw.control.job_driver import JobStopped
from llmgw.control.jobs import Job
from llmgw.obs import logs
from llmgw.wire.messages import CommandResult, ShardStatus, Upgrade

if TYPE_CHECKING:
    from llmgw.control.service import ControlPlane

log = logs.get("llmgw.control.upgrade")

__all__ = ["ClusterUpgrades", "UpgradeAsk", "UpgradeError", "RACK_LABEL", "NODE_TIMEOUT"]

RACK_LABEL = "llmgw.io/rack"
#: How long one node may take to come back with the new version (a zipapp of ~150 MB fetched and checked).
NODE_TIMEOUT = 600.0
POLL = 0.2
BY = ("node", "rack")


class UpgradeError(Exception):
    """A refusal before anything was sent; `kind` maps it onto the admin API (invalid, conflict, unavailable)."""

    def __init__(self, text: str, kind: str = "invalid") -> None:
        super().__init__(text)
        self.kind = kind


@attrs.frozen
class UpgradeAsk:
    release: str = ""
    back: bool = False
    by: str = "node"
    rollback: bool = False
    timeout: float = NODE_TIMEOUT

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> UpgradeAsk:
        from llmgw.release.store import RELEASE_NAME

        problems = []
        release = str(body.get("release") or "").strip()
        back = bool(body.get("back", False))
        by = str(body.get("by") or "node")
        rollback = bool(body.get("rollback", False))
        timeout = body.get("timeout")
        if back and release:
            problems.append("release: give a release to upgrade to, or back, not both")
        elif not back and not RELEASE_NAME.fullmatch(release):
            problems.append(f"release: {release!r} is not a release name; give the version `llmgw mirror release "
                            "list` shows, like 0.2.0" if release else "release: empty; give the version to upgrade "
                            "to (as `llmgw mirror release list` shows it), or back")
        if by not in BY:
            problems.append(f"by: {by!r}; give node (one node at a time) or rack (one {RACK_LABEL} at a time)")
        if back and rollback:
            problems.append("rollback: only with a release (going back has nothing to roll back to)")
        if timeout is None:
            timeout = NODE_TIMEOUT
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= 86400:
            problems.append(f"timeout: {timeout!r}; give the seconds one node may take to come back, 1 to 86400")
            timeout = NODE_TIMEOUT
        if problems:
            raise UpgradeError("; ".join(problems))
        return cls(release=release, back=back, by=by, rollback=rollback, timeout=float(timeout))


@attrs.define
class _Sent:
    """An Upgrade sent to one node: its session then, its engines' pids then, and the agent's answer."""

    node: str
    session: Any
    pids: dict[str, int | None]
    version: str
    failed: str = ""


class ClusterUpgrades:
    """The leader's upgrade jobs (one at a time) and the agents' answers to their Upgrade messages."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.node_timeout = NODE_TIMEOUT
        self._task: asyncio.Task | None = None
        self._job: Job | None = None
        self._sent: dict[str, _Sent] = {}  #: command id -> what was sent
        #: node -> shard -> the pid its engine runs as, from its agent's ShardStatus messages since it registered
        self._pids: dict[str, dict[str, int | None]] = {}

    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - its job says how it ended
                pass

    def command_result(self, node_id: str, message: CommandResult) -> None:
        """An agent's answer to an Upgrade: a refusal ends that node's wait (a success is seen as it registers)."""
        sent = self._sent.get(message.command_id)
        if sent is not None and sent.node == node_id and not message.ok:
            sent.failed = message.error or "the agent did not say why"

    def shard_status(self, node_id: str, message: ShardStatus) -> None:
        """Keep each engine's pid (None once it ended): an upgrade compares them with what the new agent registers."""
        pids = self._pids.setdefault(node_id, {})
        if message.state in ("stopped", "exited", "failed"):
            pids[message.shard_id] = None
        elif message.pid is not None:
            pids[message.shard_id] = message.pid

    def _running_pids(self, node: str, session: Any) -> dict[str, int | None]:
        """The node's engines now: as its Register listed them, then as its ShardStatus messages said since."""
        pids: dict[str, int | None] = {s.shard_id: s.pid for s in session.register.shards
                                       if s.state not in ("stopped", "exited", "failed")}
        for sid, pid in self._pids.get(node, {}).items():
            if pid is None:
                pids.pop(sid, None)
            else:
                pids[sid] = pid
        return pids

    # ---------------------------------------------------------------- starting

    async def start(self, body: Mapping[str, Any], *, actor: str, config_path: str | None = None) -> Job:
        """Check what is asked and the release, then start the job; UpgradeError (and nothing sent) otherwise."""
        ask = UpgradeAsk.parse(body)
        plane = self.plane
        if not plane.leading:
            leader = plane.leadership.leader
            raise UpgradeError(f"this control plane is a standby; ask the leader, {leader or 'not known yet'}",
                               "unavailable")
        if self.busy() and self._job is not None:
            raise UpgradeError(f"an upgrade is already running ({self._job.id}: {self._job.now}); wait for it to "
                               f"end (`llmgw ctl jobs {self._job.id}` follows it)", "conflict")
        mirror = plane.config.mirror.url
        if not ask.back and not mirror:
            raise UpgradeError("mirror.url is empty: nodes fetch the release from the mirror's file server; set "
                               "mirror.url in server.yaml")
        listed: dict[str, str] = {}
        kid = ""
        if not ask.back:
            kid, listed = await self._check_release(ask.release, mirror, config_path)
        what = "back to the file before" if ask.back else f"to {ask.release}"
        job = plane.jobs.start(f"cluster {what}", "upgrade", actor,
                               first=f"{actor} asked to upgrade the cluster {what}, one {ask.by} at a time")
        job.driven = True
        if not ask.back:
            plane.jobs.step(job, f"release {ask.release}: its SHA256SUMS is signed by trusted key {kid} and lists "
                                 f"{len(listed)} files; each node checks its own zipapp against it")
        self._job = job
        self._task = asyncio.get_running_loop().create_task(self._drive(job, ask, mirror), name=f"upgrade {job.id}")
        return job

    async def _check_release(self, release: str, mirror: str, config_path: str | None) -> tuple[str, dict[str, str]]:
        from llmgw.agent.self_upgrade import UpgradeRefused, signed_listing, zipapp_names
        from llmgw.release.keys import KeyError_
        from llmgw.release.trust import trust_from

        cfg = self.plane.config.releases
        try:
            trust = trust_from(config_path=config_path,
                               config_trusted=cfg.trusted_keys, config_revoked=cfg.revoked_keys)
        except KeyError_ as exc:
            raise UpgradeError(f"server.yaml releases: {exc}") from None
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
                kid, listed = await signed_listing(http, mirror, release, trust)
        except UpgradeRefused as exc:
            raise UpgradeError(str(exc)) from None
        names = {rel.rsplit("/", 1)[-1] for rel in listed}
        if not any(zipapp_names(release, m) & names for m in ("x86_64", "aarch64")):
            raise UpgradeError(f"release {release} holds no llmgw zipapp (llmgw-{release}-linux-ARCH.pyz); its "
                               f"SHA256SUMS lists {', '.join(sorted(names))}")
        return kid, listed

    # ---------------------------------------------------------------- driving

    async def _drive(self, job: Job, ask: UpgradeAsk, mirror: str) -> None:
        jobs = self.plane.jobs
        try:
            await self._run(job, ask, mirror)
        except JobStopped as exc:
            jobs.end(job, "failed", str(exc))
        except asyncio.CancelledError:
            jobs.end(job, "failed", "stopped: this control plane stopped leading, or the job was cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - a job ends in words whatever went wrong
            logs.event(log, "upgrade failed", 40, job=job.id, error=str(exc))
            jobs.end(job, "failed", f"stopped by an error: {exc}")
        finally:
            self._sent = {k: v for k, v in self._sent.items() if not k.startswith(f"upgrade:{job.id}:")}

    def _step(self, job: Job, text: str) -> None:
        if not job.active:
            raise JobStopped(job.now)
        self.plane.jobs.step(job, text)

    async def _run(self, job: Job, ask: UpgradeAsk, mirror: str) -> None:
        self._step(job, self._control_planes_words(ask))
        groups = self._groups(ask.by)
        if not groups:
            raise JobStopped("no node's agent is connected to this leader: nothing to upgrade")
        done: list[tuple[str, str]] = []  # (node, the version it ran before)
        todo = [n for g in groups for n in g]
        for group in groups:
            if not ask.back:
                already = [n for n in group if self._version(n) == ask.release]
                for n in already:
                    self._step(job, f"{n}: already runs llmgw {ask.release}")
                group = [n for n in group if n not in already]
            if not group:
                continue
            label = group[0] if len(group) == 1 else f"{RACK_LABEL}={self._rack(group[0])} ({', '.join(group)})"
            self._step(job, f"{label}: asked to {'go back' if ask.back else f'upgrade to {ask.release}'}")
            outcomes = await asyncio.gather(*(self._one(job, n, ask, mirror) for n in group))
            failed = [(n, why) for n, (ok, why, _) in zip(group, outcomes) if not ok]
            done += [(n, before) for n, (ok, _, before) in zip(group, outcomes) if ok]
            if failed:
                untried = [n for n in todo if n not in group and n not in {d for d, _ in done}]
                words = "; ".join(f"{n}: {why}" for n, why in failed)
                upgraded = ", ".join(n for n, _ in done) or "none"
                rest = f"; not tried: {', '.join(untried)}" if untried else ""
                if ask.rollback and done:
                    await self._roll_back(job, done, ask)
                    raise JobStopped(f"{words}; stopped there; the nodes upgraded before ({upgraded}) were sent "
                                     f"back to the file they ran before{rest}")
                hint = "; go back with `llmgw ctl upgrade --back`" if done and not ask.back else ""
                raise JobStopped(f"{words}; stopped there; upgraded: {upgraded}{rest}{hint}")
        versions = sorted({self._version(n) or "?" for n in todo})
        self.plane.jobs.end(job, "done", f"{len(done)} node(s) {'went back' if ask.back else 'upgraded'}; the "
                                         f"agents run llmgw {', '.join(versions)}")

    def _control_planes_words(self, ask: UpgradeAsk) -> str:
        target = "the file before" if ask.back else ask.release
        return (f"control planes: this leader runs llmgw {__version__}; upgrade each control plane's machine "
                f"itself to {target}, standbys first, then the leader (docs/upgrades.md): an agent newer than "
                "its control plane's protocol is refused")

    async def _roll_back(self, job: Job, done: list[tuple[str, str]], ask: UpgradeAsk) -> None:
        back = attrs.evolve(ask, back=True, release="")
        for node, before in done:
            self._step(job, f"{node}: sent back to llmgw {before or 'the file before'}")
            ok, why, _ = await self._one(job, node, back, "")
            if not ok:
                self._step(job, f"{node}: not back: {why}")

    async def _one(self, job: Job, node: str, ask: UpgradeAsk, mirror: str) -> tuple[bool, str, str]:
        """Send one node Upgrade and wait for it to be back; (ok, why not, the version it ran before)."""
        session = self.plane.endpoint.sessions.get(node)
        if session is None:
            return False, "its agent is not connected to the leader", ""
        before = session.register.agent_version
        command_id = f"upgrade:{job.id}:{node}"
        sent = _Sent(node, session, self._running_pids(node, session), before)
        self._sent[command_id] = sent
        started = time.monotonic()
        try:
            await session.send(Upgrade(version=ask.release, mirror=mirror, back=ask.back, command_id=command_id))
        except Exception as exc:  # noqa: BLE001 - ConnectionClosed, or the link broke
            return False, f"the Upgrade could not be sent ({exc})", before
        deadline = started + (ask.timeout or self.node_timeout)
        while True:
            if not job.active:
                raise JobStopped(job.now)
            if sent.failed:
                return False, sent.failed, before
            current = self.plane.endpoint.sessions.get(node)
            if current is not None and current is not session and not current.closed:
                now = current.register.agent_version
                if not ask.back and now != ask.release:
                    return False, (f"came back running llmgw {now or '?'}, not {ask.release} (its program was not "
                                   "replaced, or it was started from another file)"), before
                lost = self._engines_lost(sent.pids, current.register.shards)
                took = time.monotonic() - started
                if lost:
                    return False, f"back with llmgw {now} in {took:.1f} s, but {lost}", before
                kept = len(sent.pids)
                self._step(job, f"{node}: back with llmgw {now} (was {before or '?'}) in {took:.1f} s; "
                                f"{kept} engine{'s' if kept != 1 else ''} kept, same pids")
                return True, "", before
            if time.monotonic() > deadline:
                return False, (f"not back within {ask.timeout:g} s (its agent's log says why: `llmgw ctl logs "
                               f"{node}`)"), before
            await asyncio.sleep(POLL)

    @staticmethod
    def _engines_lost(pids: dict[str, int | None], shards) -> str:
        now = {s.shard_id: s.pid for s in shards}
        gone = [sid for sid in pids if sid not in now]
        changed = [sid for sid, pid in pids.items() if sid in now and pid is not None and now[sid] != pid]
        parts = []
        if gone:
            parts.append(f"it no longer runs {', '.join(gone)}")
        if changed:
            parts.append(f"{', '.join(changed)} run under another pid (restarted, not taken over)")
        return "; ".join(parts)

    # ---------------------------------------------------------------- nodes

    def _version(self, node: str) -> str:
        session = self.plane.endpoint.sessions.get(node)
        return session.register.agent_version if session is not None else ""

    def _rack(self, node: str) -> str:
        n = self.plane.inventory.get(node)
        return (n.labels.get(RACK_LABEL, "") if n is not None else "") or ""

    def _groups(self, by: str) -> list[list[str]]:
        """The connected nodes in the order they are upgraded: one a group, or one rack a group."""
        nodes = sorted(self.plane.endpoint.sessions)
        if by == "node":
            return [[n] for n in nodes]
        racks: dict[str, list[str]] = {}
        for n in nodes:
            racks.setdefault(self._rack(n) or f"\0{n}", []).append(n)  # a node with no rack is a rack of its own
        return [racks[r] for r in sorted(racks)]
