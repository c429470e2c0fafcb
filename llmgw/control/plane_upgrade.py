"""The control planes' part of `ctl upgrade`, and the job's record in the store that lets the next leader carry it on.

The leader asks a control plane to replace itself through the store: the
setting `upgrade.ask.MEMBER` (MEMBER as in its `control.members.MEMBER`
row) names the release, the mirror and an ask id. Every control plane
watches its own (`PlaneWatcher`, twice a second) and answers in
`upgrade.answer.MEMBER` with the ask's id: refused in words (nothing
changed), or done, after which it starts itself again from the new file
(llmgw.agent.self_upgrade: the one way an agent replaces itself too). It is
back when its members row says the new version. An ask of kind `lead`
hands it the lease: it takes the lease the leader has just released at
once, not a third of a TTL later.

The job itself is recorded in `upgrade.job` (`UpgradeRecord`): its steps,
what was asked, the phase it reached (`planes`, `leader-back`, `agents`) and
what each needs; written at each step, kept once it ended (until the next
upgrade), so a standby can show it and the next leader carries it on.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.agent.self_upgrade import CannotReplaceItself, UpgradeRefused
from llmgw.obs import logs

if TYPE_CHECKING:
    from llmgw.control.upgrade import ClusterUpgrades

log = logs.get("llmgw.control.plane_upgrade")

__all__ = ["JOB_SETTING", "ASK_PREFIX", "ANSWER_PREFIX", "Member", "UpgradeRecord", "PlaneWatcher", "members",
           "member_slug", "ask_plane", "answer_to", "clear_ask"]

JOB_SETTING = "upgrade.job"
ASK_PREFIX = "upgrade.ask."
ANSWER_PREFIX = "upgrade.answer."
ACTOR = "control-plane"
#: How often a control plane looks for an ask to it.
WATCH = 0.5


@attrs.frozen
class Member:
    holder: str
    slug: str  #: its `control.members.SLUG` row
    version: str  #: the llmgw it runs, as it wrote when it started ("" from one before versions were written)
    address: str = ""  #: its agent address: what stays the same when it starts again (its holder name may not)

    def same(self, other: Member) -> bool:
        return self.address == other.address if self.address and other.address else self.holder == other.holder


def member_slug(holder: str) -> str:
    from llmgw.control.service import MEMBERS_PREFIX, _member_key

    return _member_key(holder).removeprefix(MEMBERS_PREFIX)


async def members(store) -> list[Member]:
    """Every running control plane, as each recorded itself (by holder)."""
    from llmgw.control.service import MEMBERS_PREFIX

    out = []
    for key, setting in (await store.get_settings()).items():
        value = setting.value
        if key.startswith(MEMBERS_PREFIX) and isinstance(value, dict) and value.get("holder"):
            out.append(Member(str(value["holder"]), key.removeprefix(MEMBERS_PREFIX), str(value.get("version") or ""),
                              str(value.get("agent_address") or "")))
    return sorted(out, key=lambda m: m.holder)


async def ask_plane(store, slug: str, **ask: Any) -> str:
    """Ask control plane `slug` (kind `upgrade`: release, back, mirror, and `check`: only say what going back would
    run; kind `lead`: take the lease); its id."""
    ask_id = secrets.token_hex(6)
    await store.set_setting(ASK_PREFIX + slug, {"ask": ask_id, **ask}, actor=ACTOR)
    return ask_id


async def answer_to(store, slug: str, ask_id: str) -> dict[str, Any] | None:
    setting = await store.get_setting(ANSWER_PREFIX + slug)
    value = setting.value if setting is not None else None
    return value if isinstance(value, dict) and value.get("ask") == ask_id else None


async def clear_ask(store, slug: str) -> None:
    try:
        await store.unset_setting(ASK_PREFIX + slug, actor=ACTOR)
        await store.unset_setting(ANSWER_PREFIX + slug, actor=ACTOR)
    except Exception as exc:  # noqa: BLE001 - tidying only: an answered ask is never acted on twice
        log.warning("an upgrade ask was not removed: %s", exc)


@attrs.define
class UpgradeRecord:
    """An upgrade job as the store keeps it (`upgrade.job`)."""

    id: str
    model: str
    by: str
    started: float
    ask: dict[str, Any]  #: UpgradeAsk's fields
    mirror: str
    #: planes, leader-back (the leader replaced itself; wait for it), agents; going back: check, agents, planes,
    #: leader-back
    phase: str = "planes"
    state: str = "running"
    ended: float | None = None
    steps: list[dict[str, Any]] = attrs.Factory(list)  #: [{"at", "text"}]
    nodes: list[str] = attrs.Factory(list)  #: the nodes connected when it started
    done: list[list[str]] = attrs.Factory(list)  #: [node, the version it ran before], upgraded (or sent back)
    planes_done: list[list[str]] = attrs.Factory(list)  #: [holder, version before], standbys upgraded
    handed_from: str = ""  #: the leader that replaced itself and gave its lease up
    handed_from_address: str = ""  #: its agent address (its holder name may change as it starts again)
    handed_to: str = ""  #: the standby it handed the lease to ("" when it was the only control plane)
    handed_to_address: str = ""
    handed_at: float = 0.0  #: wall-clock time it gave the lease up
    leader_before: str = ""  #: the version that leader ran
    leader_to: str = ""  #: the version it starts again on (the release; going back, what its file before is)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> UpgradeRecord | None:
        if not isinstance(value, dict):
            return None
        try:
            names = {a.name for a in attrs.fields(cls)}
            return cls(**{k: v for k, v in value.items() if k in names})
        except TypeError:
            return None

    @property
    def active(self) -> bool:
        return self.state in ("running", "waiting")


class PlaneWatcher:
    """On every control plane: acts on the leader's asks to it (replace itself; take the lease)."""

    def __init__(self, upgrades: ClusterUpgrades) -> None:
        self.upgrades = upgrades
        self._handled: set[str] = set()

    @property
    def slug(self) -> str:
        return member_slug(self.upgrades.plane.holder)

    async def run(self) -> None:
        while True:
            try:
                await self.look()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store did not answer: look again later
                log.warning("upgrade asks not read: %s", exc)
            await asyncio.sleep(self.upgrades.watch_interval)

    async def look(self) -> None:
        store = self.upgrades.plane.store
        setting = await store.get_setting(ASK_PREFIX + self.slug)
        ask = setting.value if setting is not None else None
        if not isinstance(ask, dict) or not ask.get("ask") or ask["ask"] in self._handled:
            return
        if await answer_to(store, self.slug, str(ask["ask"])) is not None:  # answered before it started again
            self._handled.add(ask["ask"])
            return
        self._handled.add(ask["ask"])
        if ask.get("kind") == "lead":
            await self._take_lead(ask)
        else:
            await self._replace(ask)

    async def _answer(self, ask: dict[str, Any], **answer: Any) -> None:
        await self.upgrades.plane.store.set_setting(ANSWER_PREFIX + self.slug, {"ask": ask["ask"], **answer},
                                                    actor=ACTOR)

    async def _replace(self, ask: dict[str, Any]) -> None:
        up = self.upgrades
        back = bool(ask.get("back"))
        release = str(ask.get("release") or "")
        if back and ask.get("check"):  # going back is coming: say what to, change nothing
            try:
                version = up.back_to()
            except UpgradeRefused as exc:
                await self._answer(ask, ok=False, cannot=isinstance(exc, CannotReplaceItself), error=f"{exc}")
                return
            await self._answer(ask, ok=True, version=version, checked=True)
            return
        logs.event(log, "asked by the leader to replace this control plane's program", job=ask.get("job", ""),
                   release=release or "the file before")
        try:
            done = await up.replace_self(release=release, back=back, mirror=str(ask.get("mirror") or ""))
        except UpgradeRefused as exc:
            logs.event(log, "not upgraded", 40, error=str(exc))
            await self._answer(ask, ok=False, cannot=isinstance(exc, CannotReplaceItself), error=f"{exc}")
            return
        await self._answer(ask, ok=True, version=done.version)
        logs.event(log, "llmgw is in place; starting again", version=done.version, program=str(done.program))
        up.restart(f"{'back to' if back else 'upgrade to'} llmgw {done.version}")

    async def _take_lead(self, ask: dict[str, Any]) -> None:
        """The leader gave its lease up for us: take it now, trying every 50 ms for up to one TTL."""
        leadership = self.upgrades.plane.leadership
        started = time.monotonic()
        while not leadership.leading and time.monotonic() - started < leadership.ttl:
            if not await leadership.step():
                await asyncio.sleep(0.05)
        took = time.monotonic() - started
        if leadership.leading:
            logs.event(log, "took the lease the leader handed over", took_s=round(took, 2))
            await self._answer(ask, ok=True, took=round(took, 2), at=time.time())
        else:
            await self._answer(ask, ok=False, error=f"the lease was not free within {leadership.ttl:g} s")
