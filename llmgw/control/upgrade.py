"""`llmgw ctl upgrade RELEASE`: the control planes, then every node's agent, moved to a signed release, as a job.

    job = await plane.upgrades.start({"release": "0.2.0", "by": "node"}, actor="alice")

The leader drives it (kind `upgrade`):

1. **the release**: its SHA256SUMS on the mirror's file server
   (`mirror.url`, `_llmgw/releases/RELEASE/`, put there by `llmgw mirror
   release add`, which checked every file) must be signed by a key
   server.yaml's `releases` trusts, and list a zipapp for each node's
   machine. Refused before anything is sent otherwise: nothing changes.
2. **the standby control planes**, one at a time, asked through the store
   (llmgw/control/plane_upgrade.py): each checks the release with its own
   server.yaml's keys, puts it in place and starts itself again; the next
   goes once it is back (its members row says the new version). A standby
   that refuses or does not come back stops the job before any agent.
3. **the leader itself**, last of the control planes: its own file put in
   place, its lease handed to an upgraded standby (given up and taken at
   once, not left to lapse), then it starts itself again. The job is
   recorded in the store at every step; the new leader carries it on
   (`leading_changed`): it waits for the old leader to be back as a standby
   on the release, then goes on with
4. **the agents**, one node at a time (`by: rack`: every node of one
   `llmgw.io/rack` at once): each is sent `Upgrade`, checks its zipapp
   against the signed sums with its own trusted keys, puts it in place,
   re-execs and registers again; the next goes once it is back with the
   new version and the same engines (same pids). A node already on the
   release is passed over.

A control plane that does not run from llmgw's one file (a source
checkout), or was not started by `llmgw server`, cannot replace itself:
the job says so and passes it over. The first failure stops the job in
words (which node or control plane, why, which are done and which were not
tried); with `rollback` the ones done are sent back to the file they ran
before.

`back` goes the other way, in the reverse order: every control plane is
first asked whether it has a file to go back to (one without refuses the
job in words, before anything moves); then every node's agent goes back
(each swaps its program with the file kept from before its last upgrade),
so no agent ever runs newer than its control planes; then the standbys,
one at a time, by the same ask through the store; then the leader, which
hands its lease to a standby that went back and starts again; the new
leader waits for it back and ends the job. Agents and control planes go
back by the one code path `llmgw self-upgrade --back` uses
(self_upgrade.upgrade_self with `back`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import attrs

from llmgw import __version__
from llmgw.agent.self_upgrade import (CannotReplaceItself, Replaced, UpgradeRefused, previous_version,
                                      running_program, upgrade_self)
from llmgw.control.job_driver import JobStopped
from llmgw.control.jobs import Job, JobStep
from llmgw.control.plane_upgrade import (ACTOR, JOB_SETTING, WATCH, Member, PlaneWatcher, UpgradeRecord, answer_to,
                                         ask_plane, clear_ask, member_slug, members)
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


class HandedOver(Exception):
    """This leader gave its lease up in the middle of the job and starts itself again; the next leader carries the
    job on from its record."""


class ClusterUpgrades:
    """The leader's upgrade jobs (one at a time), the agents' answers to their Upgrade messages, and, on every
    control plane, the leader's asks to it (llmgw/control/plane_upgrade.py)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.node_timeout = NODE_TIMEOUT
        #: the llmgw this control plane runs (its members row says it)
        self.version = __version__
        #: this control plane's own program (the zipapp it runs); CannotReplaceItself from a source checkout
        self.program: Callable[[], Path] = running_program
        #: stops the server so it starts itself again (ControlPlaneSlot.restart, set by `llmgw server`); None when
        #: something else runs this control plane, which then cannot replace itself
        self.restart: Callable[[str], None] | None = None
        #: how often this control plane looks for the leader's asks to it, and the leader for their answers
        self.watch_interval = WATCH
        #: the server.yaml this control plane read (key files named in its `releases` are relative to it)
        self.config_path: str | None = None
        self._task: asyncio.Task | None = None
        self._watch: asyncio.Task | None = None
        self._job: Job | None = None
        self._record: UpgradeRecord | None = None
        self._sent: dict[str, _Sent] = {}  #: command id -> what was sent
        #: node -> shard -> the pid its engine runs as, from its agent's ShardStatus messages since it registered
        self._pids: dict[str, dict[str, int | None]] = {}

    def busy(self) -> bool:
        """An upgrade runs (its task is past the job's end only while it writes the record)."""
        return self._task is not None and not self._task.done() and (self._job is None or self._job.active)

    def watch(self) -> None:
        """Act on the leader's asks to this control plane (every control plane runs this)."""
        if self._watch is None or self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(PlaneWatcher(self).run(), name="upgrade asks")

    async def stop(self) -> None:
        for task in (self._task, self._watch):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 - its job says how it ended
                    pass

    def leading_changed(self, leading: bool) -> None:
        """This control plane now leads: an upgrade the leader before left running is carried on from its record."""
        if leading and not self.busy():
            self._task = asyncio.get_running_loop().create_task(self._carry_on(), name="upgrade carried on")

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

    # ---------------------------------------------------------------- this control plane's own program

    async def replace_self(self, *, release: str, back: bool, mirror: str) -> Replaced:
        """Put `release` (or the file before) in place of this control plane's program, checked with server.yaml's
        keys, as an agent does its own; UpgradeRefused changes nothing. The caller then has it start again."""
        from llmgw.release.keys import KeyError_
        from llmgw.release.trust import TrustSet

        if self.restart is None:
            raise CannotReplaceItself("this control plane was not started by `llmgw server`, so it cannot start "
                                      "itself again")
        program = self.program()
        try:
            trust = TrustSet() if back else self._trust()
        except KeyError_ as exc:
            raise UpgradeRefused(f"server.yaml releases: {exc}") from None
        return await upgrade_self(program, version=release, back=back, mirror=mirror, trust=trust)

    def back_to(self) -> str:
        """The version going back would run this control plane on (its program's .previous file); UpgradeRefused
        (CannotReplaceItself) naming why it cannot go back. Nothing is changed."""
        if self.restart is None:
            raise CannotReplaceItself("this control plane was not started by `llmgw server`, so it cannot start "
                                      "itself again")
        return previous_version(self.program())

    def _trust(self):
        from llmgw.release.trust import trust_from

        cfg = self.plane.config.releases
        return trust_from(config_path=self.config_path, config_trusted=cfg.trusted_keys,
                          config_revoked=cfg.revoked_keys)

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
        if config_path:
            self.config_path = config_path
        listed: dict[str, str] = {}
        kid = ""
        if not ask.back:
            kid, listed = await self._check_release(ask.release, mirror, config_path)
        what = "back to the file before" if ask.back else f"to {ask.release}"
        job = plane.jobs.start(f"cluster {what}", "upgrade", actor,
                               first=f"{actor} asked to upgrade the cluster {what}, one {ask.by} at a time")
        job.driven = True
        self._record = UpgradeRecord(id=job.id, model=job.model, by=actor, started=job.started,
                                     ask=attrs.asdict(ask), mirror=mirror, phase="check" if ask.back else "planes",
                                     nodes=sorted(plane.endpoint.sessions))
        self._job = job
        if not ask.back:
            await self._step(job, f"release {ask.release}: its SHA256SUMS is signed by trusted key {kid} and "
                                  f"lists {len(listed)} files; each control plane and node checks its own zipapp "
                                  "against it")
        else:
            await self._save(job)
        self._task = asyncio.get_running_loop().create_task(self._drive(job, ask, mirror), name=f"upgrade {job.id}")
        return job

    async def _check_release(self, release: str, mirror: str, config_path: str | None) -> tuple[str, dict[str, str]]:
        from llmgw.agent.self_upgrade import signed_listing, zipapp_names
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

    # ---------------------------------------------------------------- the record in the store

    async def _save(self, job: Job) -> None:
        record = self._record
        if record is None or record.id != job.id:
            return
        record.state, record.ended = job.state, job.ended
        record.steps = [{"at": s.at, "text": s.text} for s in job.steps]
        try:
            await self.plane.store.set_setting(JOB_SETTING, record.to_json(), actor=ACTOR)
        except Exception as exc:  # noqa: BLE001 - the job goes on; a take-over then resumes from an older step
            logs.event(log, "the upgrade's record was not written", 30, job=job.id, error=str(exc))

    async def recorded(self, job_id: str) -> Job | None:
        """The upgrade job `job_id` as the store records it (a standby shows it while the leader runs it)."""
        setting = await self.plane.store.get_setting(JOB_SETTING)
        record = UpgradeRecord.from_json(setting.value if setting is not None else None)
        if record is None or record.id != job_id:
            return None
        steps = [JobStep(at=float(s["at"]), text=str(s["text"])) for s in record.steps]
        return Job(id=record.id, model=record.model, kind="upgrade", by=record.by, started=record.started,
                   state=record.state, now=steps[-1].text if steps else "", steps=steps, ended=record.ended,
                   driven=True)

    async def _carry_on(self) -> None:
        """On gaining the lease: take up the upgrade the store records as running, from the phase it reached."""
        plane = self.plane
        try:
            setting = await plane.store.get_setting(JOB_SETTING)
        except Exception as exc:  # noqa: BLE001 - no record to read: nothing is carried on
            logs.event(log, "the upgrade's record was not read", 30, error=str(exc))
            return
        record = UpgradeRecord.from_json(setting.value if setting is not None else None)
        if record is None or not record.active or not plane.leading:
            return
        try:
            ask = UpgradeAsk.parse(record.ask)
        except UpgradeError as exc:
            logs.event(log, "the upgrade's record is not understood; left as it is", 30, error=str(exc))
            return
        steps = [JobStep(at=float(s["at"]), text=str(s["text"])) for s in record.steps]
        job = plane.jobs.restore(record.id, record.model, "upgrade", record.by, record.started, steps)
        job.driven = True
        self._job, self._record = job, record
        await self._step(job, await self._how_it_came(record))
        await self._drive(job, ask, record.mirror)

    async def _how_it_came(self, record: UpgradeRecord) -> str:
        me = self.plane.holder
        if record.handed_from and Member(record.handed_from, "", "", record.handed_from_address).same(self._me()):
            return f"{me} leads again, on llmgw {self.version}, and carries the job on"
        if record.handed_to and Member(record.handed_to, "", "", record.handed_to_address).same(self._me()):
            took = ""
            for _ in range(20):  # the answer is written just after the lease is taken
                answer = await self._lead_answer()
                if answer is not None:  # the leader's clock when it gave the lease up, this one's when it took it
                    gap = max(0.0, float(answer.get("at") or 0) - record.handed_at) if record.handed_at else 0.0
                    took = f" (taken {gap:.1f} s after it was given up)"
                    break
                await asyncio.sleep(0.05)
            return f"{me} leads now: {record.handed_from} handed its lease over{took}; {me} carries the job on"
        return (f"{me} leads now (the leader before stopped leading in the middle of the job: its lease lapsed or it "
                f"stopped) and carries the job on from its last step")

    async def _lead_answer(self) -> dict[str, Any] | None:
        from llmgw.control.plane_upgrade import ANSWER_PREFIX

        setting = await self.plane.store.get_setting(ANSWER_PREFIX + member_slug(self.plane.holder))
        value = setting.value if setting is not None else None
        return value if isinstance(value, dict) and "took" in value else None

    # ---------------------------------------------------------------- driving

    async def _drive(self, job: Job, ask: UpgradeAsk, mirror: str) -> None:
        jobs = self.plane.jobs
        try:
            await self._run(job, ask, mirror)
        except HandedOver:
            return  # the record says where it is; the next leader carries it on
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
        if not job.active and self.plane.leading:
            await self._save(job)

    async def _step(self, job: Job, text: str) -> None:
        if not job.active:
            raise JobStopped(job.now)
        self.plane.jobs.step(job, text)
        await self._save(job)

    async def _run(self, job: Job, ask: UpgradeAsk, mirror: str) -> None:
        record = self._record
        assert record is not None
        if ask.back:
            await self._run_back(job, ask, record)
            return
        if record.phase == "planes":
            await self._standbys(job, ask, mirror, record)
            record.phase = "leader"
        if record.phase == "leader":
            await self._leader_itself(job, ask, mirror, record)
            record.phase = "agents"
        if record.phase == "leader-back":
            await self._leader_back(job, ask, record)
            record.phase = "agents"
        await self._agents(job, ask, mirror, record)

    async def _run_back(self, job: Job, ask: UpgradeAsk, record: UpgradeRecord) -> None:
        """Going back, the reverse of the upgrade: every control plane checked, then the agents, then the standbys,
        then the leader handing its lease to one that went back (the next leader ends the job)."""
        if record.phase == "check":
            await self._back_check(job)
            record.phase = "agents"
        if record.phase == "agents":
            await self._agents(job, ask, "", record)
            record.phase = "planes"
        if record.phase == "planes":
            await self._standbys(job, ask, "", record)
            record.phase = "leader"
        if record.phase == "leader":
            await self._leader_itself(job, ask, "", record)
            record.phase = "ended"
        if record.phase == "leader-back":
            await self._leader_back(job, ask, record)
        planes = sorted({m.version or "?" for m in await members(self.plane.store)})
        nodes = sorted(set(record.nodes) | set(self.plane.endpoint.sessions))
        versions = sorted({self._version(n) or "?" for n in nodes})
        agents = f"; the agents run llmgw {', '.join(versions)}" if nodes else ""
        self.plane.jobs.end(job, "done", f"{len(record.done)} node(s) and the control planes went back; the control "
                                         f"planes run llmgw {', '.join(planes)}{agents}")

    async def _back_check(self, job: Job) -> None:
        """Ask every control plane what it would go back to, before anything moves: one with no file to go back
        to stops the job here, nothing changed."""
        store = self.plane.store
        said: list[str] = []
        missing: list[str] = []
        for m in await members(store):
            if m.same(self._me()):
                try:
                    said.append(f"{m.holder} (the leader): back to llmgw {self.back_to()}")
                except CannotReplaceItself as exc:
                    said.append(f"{m.holder} (the leader): {exc}: will be passed over")
                except UpgradeRefused as exc:
                    missing.append(f"{m.holder} (the leader): {exc}")
                continue
            ask_id = await ask_plane(store, m.slug, kind="upgrade", job=job.id, back=True, check=True)
            answer = None
            try:
                deadline = time.monotonic() + 30.0
                while answer is None and time.monotonic() < deadline:
                    answer = await answer_to(store, m.slug, ask_id)
                    if answer is None:
                        await asyncio.sleep(POLL)
            finally:
                await clear_ask(store, m.slug)
            if answer is None:
                missing.append(f"{m.holder} (standby): did not answer within 30 s whether it can go back (its log "
                               "says why: `journalctl -u llmgw-server` on its machine)")
            elif answer.get("ok"):
                said.append(f"{m.holder} (standby): back to llmgw {answer.get('version') or '?'}")
            elif answer.get("cannot"):
                said.append(f"{m.holder} (standby): {answer.get('error')}: will be passed over")
            else:
                missing.append(f"{m.holder} (standby): {answer.get('error') or 'it did not say why'}")
        if missing:
            raise JobStopped(f"{'; '.join(missing)}; nothing was sent back (no agent, no control plane): put the "
                             "file it ran before back on it by hand (docs/upgrades.md), or upgrade forward instead")
        await self._step(job, "control planes checked: " + "; ".join(said) + "; the agents go back first, then the "
                              "standbys, then this leader hands its lease to one that went back")

    # ---------------------------------------------------------------- the control planes

    def _me(self) -> Member:
        return Member(self.plane.holder, member_slug(self.plane.holder), self.version, self.plane.advertise)

    async def _standbys(self, job: Job, ask: UpgradeAsk, mirror: str, record: UpgradeRecord) -> None:
        me = self.plane.holder
        planes = await members(self.plane.store)
        standbys = [m for m in planes if not m.same(self._me())]
        if ask.back:
            await self._step(job, f"control planes: {len(standbys)} standby{'s' if len(standbys) != 1 else ''} go "
                                  f"back first, then this leader ({me}, llmgw {self.version}) hands its lease to one "
                                  "that went back and goes back last")
        else:
            await self._step(job, f"control planes: this leader ({me}) runs llmgw {self.version}; "
                                  f"{len(standbys)} standby{'s' if len(standbys) != 1 else ''} first, then this "
                                  "leader hands its lease over and is replaced last")
        for m in standbys:
            if not ask.back and m.version == ask.release:
                await self._step(job, f"{m.holder} (standby): already runs llmgw {ask.release}")
                continue
            ok, why, cannot, replaced = await self._plane_one(job, m, ask, mirror, ask.release)
            if ok:
                record.planes_done.append([m.holder, m.version])
                continue
            if cannot:
                yourself = "send it back yourself (`llmgw self-upgrade --back`" if ask.back else \
                    "upgrade it yourself (`llmgw self-upgrade`"
                await self._step(job, f"{m.holder} (standby): {why}: passed over; {yourself}, docs/upgrades.md)")
                continue
            done = [h for h, _ in record.planes_done] + ([m.holder] if replaced else [])
            if ask.back:
                went = ", ".join(done) or "none"
                raise JobStopped(f"control plane {m.holder}: {why}; stopped there: the agents went back, this "
                                 f"leader did not; standbys gone back: {went}")
            untried = [s.holder for s in standbys if s.holder not in done and s.holder != m.holder]
            rest = f"; not tried: {', '.join(untried)}" if untried else ""
            if ask.rollback and done:
                await self._planes_back(job, [*record.planes_done, *([[m.holder, m.version]] if replaced else [])],
                                        ask.timeout)
                raise JobStopped(f"control plane {m.holder}: {why}; stopped there, before this leader and any "
                                 f"agent; the control planes upgraded ({', '.join(done)}) were sent back to the "
                                 f"file they ran before{rest}")
            hint = (f"; upgraded: {', '.join(done)} (`llmgw ctl upgrade {ask.release} --rollback` sends them "
                    "back at the next failure)") if done else "; upgraded: none"
            raise JobStopped(f"control plane {m.holder}: {why}; stopped there, before this leader and any agent"
                             f"{hint}{rest}")

    async def _plane_one(self, job: Job, m: Member, ask: UpgradeAsk, mirror: str,
                         want: str) -> tuple[bool, str, bool, bool]:
        """Ask one standby to upgrade (or go back) and wait for it back on `want` ("": any version): (ok, why not,
        it cannot replace itself, it replaced its file)."""
        store = self.plane.store
        target = "go back to the file before" if ask.back else f"upgrade to {ask.release}"
        ask_id = await ask_plane(store, m.slug, kind="upgrade", job=job.id, release=ask.release, back=ask.back,
                                 mirror=mirror)
        await self._step(job, f"{m.holder} (standby, llmgw {m.version or '?'}): asked to {target}")
        started = time.monotonic()
        replaced = False
        try:
            while True:
                if not job.active:
                    raise JobStopped(job.now)
                answer = await answer_to(store, m.slug, ask_id)
                if answer is not None and not answer.get("ok"):
                    return False, str(answer.get("error") or "it did not say why"), bool(answer.get("cannot")), False
                if answer is not None and ask.back and not want:  # back: to the version its file before is
                    want = str(answer.get("version") or "")
                replaced = replaced or answer is not None
                now = next((p.version for p in await members(store) if p.same(m)), None)
                if replaced and now is not None and (now == want or not want):
                    took = time.monotonic() - started
                    await self._step(job, f"{m.holder}: back as a standby with llmgw {now} (was {m.version or '?'}) "
                                          f"in {took:.1f} s")
                    return True, "", False, True
                if time.monotonic() - started > ask.timeout:
                    said = "it replaced its file but " if replaced else ""
                    return False, (f"{said}not back within {ask.timeout:g} s (its log says why: `journalctl -u "
                                   "llmgw-server` on its machine)"), False, replaced
                await asyncio.sleep(POLL)
        finally:
            await clear_ask(store, m.slug)

    async def _planes_back(self, job: Job, done: list[list[str]], timeout: float) -> None:
        planes = {p.holder: p for p in await members(self.plane.store)}
        back = UpgradeAsk(back=True, timeout=timeout)
        for holder, before in done:
            await self._step(job, f"{holder}: sent back to llmgw {before or 'the file before'}")
            member = planes.get(holder) or Member(holder, member_slug(holder), "")
            ok, why, _, _ = await self._plane_one(job, member, back, "", before)
            if not ok:
                await self._step(job, f"{holder}: not back: {why}")

    async def _leader_itself(self, job: Job, ask: UpgradeAsk, mirror: str, record: UpgradeRecord) -> None:
        me = self.plane.holder
        if not ask.back and self.version == ask.release:
            await self._step(job, f"{me} (the leader): already runs llmgw {ask.release}")
            return
        try:
            done = await self.replace_self(release=ask.release, back=ask.back, mirror=mirror)
        except CannotReplaceItself as exc:
            yourself = "send it back yourself (`llmgw self-upgrade --back`" if ask.back else \
                "upgrade it yourself (`llmgw self-upgrade`"
            await self._step(job, f"{me} (the leader): {exc}: not replaced; {yourself}, docs/upgrades.md)")
            return
        except UpgradeRefused as exc:
            if ask.back:
                raise JobStopped(f"the leader {me}: {exc}; stopped there: the agents and standbys went back, this "
                                 "leader did not") from None
            upgraded = ", ".join(h for h, _ in record.planes_done)
            if ask.rollback and record.planes_done:
                await self._planes_back(job, record.planes_done, ask.timeout)
                raise JobStopped(f"the leader {me}: {exc}; stopped there, before any agent; the control planes "
                                 f"upgraded ({upgraded}) were sent back to the file they ran before") from None
            raise JobStopped(f"the leader {me}: {exc}; stopped there, before any agent; upgraded: "
                             f"{upgraded or 'none'}") from None
        target = done.version  # the release, or (back) what the file before is
        upgraded = [m for m in await members(self.plane.store) if not m.same(self._me()) and m.version == target]
        record.phase, record.handed_from, record.leader_before = "leader-back", me, self.version
        record.leader_to = target
        record.handed_from_address = self.plane.advertise
        record.handed_to = upgraded[0].holder if upgraded else ""
        record.handed_to_address = upgraded[0].address if upgraded else ""
        kept = "the upgrade kept as" if ask.back else "the file before kept as"
        await self._step(job, f"{me} (the leader): llmgw {done.version} is in place ({kept} {done.previous.name})")
        if upgraded:
            await self._step(job, f"{me}: hands its lease to {record.handed_to} "
                                  f"({'went back' if ask.back else 'upgraded'}), which carries the job on; {me} then "
                                  f"starts again on llmgw {target}")
            await ask_plane(self.plane.store, upgraded[0].slug, kind="lead", job=job.id)
        else:
            await self._step(job, f"{me}: no standby runs llmgw {target}: it gives its lease up, starts again on "
                                  f"llmgw {target} and whichever control plane leads next carries the job on (the "
                                  "agents reconnect meanwhile)")
        record.handed_at = time.time()
        await self._save(job)
        await self.plane.leadership.stop(release=True)  # given up, so the standby leads at once (not on expiry)
        assert self.restart is not None
        self.restart(f"{'back to' if ask.back else 'upgrade to'} llmgw {done.version}")
        raise HandedOver()

    async def _leader_back(self, job: Job, ask: UpgradeAsk, record: UpgradeRecord) -> None:
        """The leader before replaced itself: wait for it back on the release (as a standby, or leading again)."""
        before = record.handed_from
        want = record.leader_to or ask.release
        gone = Member(before, member_slug(before), "", record.handed_from_address)
        if gone.same(self._me()):
            if self.version != want:
                raise JobStopped(f"{before} started again on llmgw {self.version}, not {want} (its program "
                                 "was put back or replaced meanwhile)")
            return
        done = "the agents and standbys went back" if ask.back else "no agent was upgraded"
        started = time.monotonic()
        while True:
            now = next((p.version for p in await members(self.plane.store) if p.same(gone)), None)
            if now == want:
                await self._step(job, f"{before}: back as a standby with llmgw {now} (was {record.leader_before})")
                return
            if time.monotonic() - started > ask.timeout:
                raise JobStopped(f"control plane {before}: replaced its file and gave its lease up, but was not back "
                                 f"within {ask.timeout:g} s (its log says why: `journalctl -u llmgw-server` on its "
                                 f"machine); {done}")
            await asyncio.sleep(POLL)

    # ---------------------------------------------------------------- the agents

    async def _agents(self, job: Job, ask: UpgradeAsk, mirror: str, record: UpgradeRecord) -> None:
        nodes = sorted(set(record.nodes) | set(self.plane.endpoint.sessions))
        if not nodes and ask.back:
            await self._step(job, "no node's agent is connected: no agent to send back")
            return
        if not nodes:
            if record.planes_done or record.handed_from:
                self.plane.jobs.end(job, "done", "the control planes upgraded; no node's agent is connected")
                return
            raise JobStopped("no node's agent is connected to this leader: nothing to upgrade")
        groups = self._groups(ask.by, nodes)
        done: list[tuple[str, str]] = [(n, b) for n, b in record.done]
        todo = [n for g in groups for n in g]
        for group in groups:
            group = [n for n in group if n not in {d for d, _ in done}]
            if not ask.back:
                await self._connected(group, min(ask.timeout, 60.0))
                already = [n for n in group if self._version(n) == ask.release]
                for n in already:
                    await self._step(job, f"{n}: already runs llmgw {ask.release}")
                group = [n for n in group if n not in already]
            if not group:
                continue
            label = group[0] if len(group) == 1 else f"{RACK_LABEL}={self._rack(group[0])} ({', '.join(group)})"
            await self._step(job, f"{label}: asked to {'go back' if ask.back else f'upgrade to {ask.release}'}")
            outcomes = await asyncio.gather(*(self._one(job, n, ask, mirror) for n in group))
            failed = [(n, why) for n, (ok, why, _) in zip(group, outcomes) if not ok]
            done += [(n, before) for n, (ok, _, before) in zip(group, outcomes) if ok]
            record.done = [[n, b] for n, b in done]
            if failed:
                untried = [n for n in todo if n not in group and n not in {d for d, _ in done}]
                words = "; ".join(f"{n}: {why}" for n, why in failed)
                upgraded = ", ".join(n for n, _ in done) or "none"
                rest = f"; not tried: {', '.join(untried)}" if untried else ""
                if ask.rollback and done:
                    await self._roll_back(job, done, ask)
                    raise JobStopped(f"{words}; stopped there; the nodes upgraded before ({upgraded}) were sent "
                                     f"back to the file they ran before{rest}")
                if ask.back:
                    raise JobStopped(f"{words}; stopped there, before any control plane; went back: {upgraded}{rest}")
                hint = "; go back with `llmgw ctl upgrade --back`" if done else ""
                raise JobStopped(f"{words}; stopped there; upgraded: {upgraded}{rest}{hint}")
        if ask.back:
            return  # the control planes go back next
        versions = sorted({self._version(n) or "?" for n in todo})
        planes = ""
        if not ask.back and (record.planes_done or record.handed_from):
            planes = "the control planes and "
        self.plane.jobs.end(job, "done", f"{planes}{len(done)} node(s) {'went back' if ask.back else 'upgraded'}; "
                                         f"the agents run llmgw {', '.join(versions)}")

    async def _connected(self, nodes: list[str], timeout: float) -> None:
        """Give nodes not connected (yet: they dial a new leader after a hand-over) `timeout` seconds to come."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(n not in self.plane.endpoint.sessions for n in nodes):
            await asyncio.sleep(POLL)

    async def _roll_back(self, job: Job, done: list[tuple[str, str]], ask: UpgradeAsk) -> None:
        back = attrs.evolve(ask, back=True, release="")
        for node, before in done:
            await self._step(job, f"{node}: sent back to llmgw {before or 'the file before'}")
            ok, why, _ = await self._one(job, node, back, "")
            if not ok:
                await self._step(job, f"{node}: not back: {why}")

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
                await self._step(job, f"{node}: back with llmgw {now} (was {before or '?'}) in {took:.1f} s; "
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

    def _groups(self, by: str, nodes: list[str]) -> list[list[str]]:
        """The nodes in the order they are upgraded: one a group, or one rack a group."""
        if by == "node":
            return [[n] for n in nodes]
        racks: dict[str, list[str]] = {}
        for n in nodes:
            racks.setdefault(self._rack(n) or f"\0{n}", []).append(n)  # a node with no rack is a rack of its own
        return [racks[r] for r in sorted(racks)]
