"""Engine processes: started, watched until ready, stopped, and taken over by the next agent.

Each shard is one engine process in a session of its own, writing its
output to `STATE/logs/<shard>.log`, which the supervisor follows into a ring
of the last lines and rotates by size. Its record (pid, the process's start
time, port, launch plan, key, log path, state) is kept in
`STATE/shards/<shard>.json`, written whole or not at all, so a new agent
reading the directory adopts the engines still running without restarting
them: the engine never depended on the agent, and never notices.

States (the wire's `SHARD_STATES`): starting → ready; starting → failed (it
exited, did not answer in time, or a readiness check refused it); ready →
exited (it ended by itself); any → stopping → stopped (asked to).
Every change goes to `on_change(shard)`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import attrs

from llmgw.agent import procs
from llmgw.agent.engine_user import EngineUser, as_engine_user
from llmgw.agent.procs import LaunchError, LogRing, LogTail, ProcessIdentity
from llmgw.plugins.types import LaunchPlan
from llmgw.tasks import cancel_and_wait

__all__ = [
    "EXITED",
    "FAILED",
    "READY",
    "SHARD_ENV",
    "STARTING",
    "STOPPED",
    "STOPPING",
    "TERMINAL",
    "ReadyCheck",
    "Shard",
    "Supervisor",
    "SupervisorError",
    "valid_shard_id",
    "write_atomic",
]

log = logging.getLogger("llmgw.agent.supervisor")

STARTING, READY, FAILED, STOPPING, STOPPED, EXITED = "starting", "ready", "failed", "stopping", "stopped", "exited"
TERMINAL = frozenset({FAILED, STOPPED, EXITED})
#: Set in every engine's environment: finds an engine whose pid was never recorded.
SHARD_ENV = "LLMGW_SHARD_ID"
RECORD_VERSION = 1
_SHARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

#: Given the engine's output so far, once it answers: a reason to refuse it, or None.
ReadyCheck = Callable[[list[str]], "str | None"]


def valid_shard_id(shard_id: str) -> bool:
    """Whether `shard_id` can name a shard's files (no path separators, no leading dot)."""
    return bool(_SHARD_ID.fullmatch(shard_id))


class SupervisorError(Exception):
    """A request the supervisor cannot carry out (an unknown shard, a second start of a running one)."""


@attrs.define(eq=False)
class Shard:
    """One engine process and what the agent knows of it."""

    shard_id: str
    plan: LaunchPlan
    port: int
    api_key: str = attrs.field(repr=False)
    log_path: Path
    host: str = "127.0.0.1"  #: where the supervisor asks it whether it is ready
    model: str = ""
    engine: str = ""
    gpus: tuple[int, ...] = ()
    weights: str = ""  #: the local path of its weights, so they are not removed under it
    start_timeout: float = 600.0
    meta: dict[str, Any] = attrs.Factory(dict)
    state: str = STARTING
    message: str = ""
    exit_code: int | None = None
    ident: ProcessIdentity | None = None
    started_at: float = 0.0
    ready_at: float | None = None
    adopted: bool = False
    ring: LogRing = attrs.field(factory=lambda: LogRing(2000), repr=False)
    # Run time only, not kept in the record.
    _popen: subprocess.Popen | None = attrs.field(default=None, repr=False)
    _tail: LogTail | None = attrs.field(default=None, repr=False)
    _watch: asyncio.Task | None = attrs.field(default=None, repr=False)
    _exited: asyncio.Event = attrs.field(factory=asyncio.Event, repr=False)
    _settled: asyncio.Event = attrs.field(factory=asyncio.Event, repr=False)
    _fail_on_exit: str | None = attrs.field(default=None, repr=False)
    _cpu_sample: tuple[float, int] | None = attrs.field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.ident.pid if self.ident else None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def logs(self, n: int | None = None) -> list[str]:
        """The engine's last `n` lines (all the ring holds when None)."""
        if self._tail is not None:
            self._tail.poll()
        return self.ring.last(n)

    def record(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION, "shard_id": self.shard_id, "model": self.model, "engine": self.engine,
            "port": self.port, "host": self.host, "gpus": list(self.gpus), "weights": self.weights,
            "plan": {"argv": list(self.plan.argv), "env": dict(self.plan.env), "ready_path": self.plan.ready_path,
                     "metrics_path": self.plan.metrics_path},
            "api_key": self.api_key, "log_path": str(self.log_path), "start_timeout": self.start_timeout,
            "meta": self.meta, "state": self.state, "message": self.message, "exit_code": self.exit_code,
            "pid": self.pid, "start_ticks": self.ident.start_ticks if self.ident else None,
            "boot_id": self.ident.boot_id if self.ident else "", "started_at": self.started_at,
            "ready_at": self.ready_at,
        }

    @classmethod
    def from_record(cls, data: dict[str, Any], ring_size: int) -> Shard:
        plan = data["plan"]
        ident = None
        if data.get("pid") and data.get("start_ticks") is not None:
            ident = ProcessIdentity(int(data["pid"]), int(data["start_ticks"]), str(data.get("boot_id") or ""))
        return cls(
            shard_id=str(data["shard_id"]), model=str(data.get("model", "")), engine=str(data.get("engine", "")),
            port=int(data["port"]), host=str(data.get("host") or "127.0.0.1"),
            gpus=tuple(int(g) for g in data.get("gpus", ())), weights=str(data.get("weights", "")),
            plan=LaunchPlan(argv=list(plan["argv"]), env=dict(plan["env"]),
                            ready_path=plan.get("ready_path", "/health"), metrics_path=plan.get("metrics_path")),
            api_key=str(data.get("api_key", "")), log_path=Path(data["log_path"]),
            start_timeout=float(data.get("start_timeout", 600.0)), meta=dict(data.get("meta") or {}),
            state=str(data.get("state", STARTING)), message=str(data.get("message", "")),
            exit_code=data.get("exit_code"), ident=ident, started_at=float(data.get("started_at") or 0.0),
            ready_at=data.get("ready_at"), adopted=True, ring=LogRing(ring_size),
        )


class Supervisor:
    """Starts, watches, stops and adopts engine processes; one per agent."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        ring_size: int = 2000,
        on_change: Callable[[Shard], None] | None = None,
        log_max_bytes: int = 20 << 20,
        log_keep: int = 3,
        poll_interval: float = 0.25,
        ready_interval: float = 0.5,
        run_as: EngineUser | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        #: who engines run as (None: as the agent)
        self.run_as = run_as
        self.records_dir = self.state_dir / "shards"
        self.logs_dir = self.state_dir / "logs"
        self.ring_size = ring_size
        self.on_change = on_change
        self.log_max_bytes = log_max_bytes
        self.log_keep = log_keep
        self.poll_interval = poll_interval
        self.ready_interval = ready_interval
        self._shards: dict[str, Shard] = {}
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task] = set()
        for d in (self.state_dir, self.records_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.records_dir, 0o700)  # records hold the engines' keys

    # --------------------------------------------------------------- reading

    def get(self, shard_id: str) -> Shard | None:
        return self._shards.get(shard_id)

    def shards(self) -> list[Shard]:
        return list(self._shards.values())

    def in_use(self) -> dict[str, str]:
        """Weights paths used by shards that are not over, to the shard using each."""
        return {s.weights: s.shard_id for s in self._shards.values() if s.weights and not s.terminal}

    def ports(self) -> set[int]:
        return {s.port for s in self._shards.values() if not s.terminal}

    def usage(self, shard: Shard) -> tuple[float | None, int | None]:
        """(CPU percent of one core, resident bytes) of the shard's whole process group, now."""
        if shard.ident is None or shard.terminal:
            return None, None
        members = procs.group_members(shard.ident.pid)
        ticks = sum(m.utime + m.stime for m in members)
        rss = sum(procs.rss_bytes(m.pid) for m in members)
        now = time.monotonic()
        cpu = None
        if shard._cpu_sample is not None:
            then, before = shard._cpu_sample
            if now > then and ticks >= before:
                cpu = round(100.0 * (ticks - before) / procs.clock_ticks() / (now - then), 1)
        shard._cpu_sample = (now, ticks)
        return cpu, rss

    # --------------------------------------------------------------- starting

    async def start(
        self,
        shard_id: str,
        plan: LaunchPlan,
        *,
        port: int,
        api_key: str,
        host: str = "127.0.0.1",
        model: str = "",
        engine: str = "",
        gpus: Sequence[int] = (),
        weights: str = "",
        start_timeout: float = 600.0,
        check_ready: ReadyCheck | None = None,
        meta: dict[str, Any] | None = None,
        cwd: Path | None = None,
    ) -> Shard:
        """Launch the plan and wait until it answers; returns the shard ready or failed."""
        if not _SHARD_ID.fullmatch(shard_id):
            raise SupervisorError(f"shard id {shard_id!r}: expected letters, digits and . _ : @ - (128 at most)")
        old = self._shards.get(shard_id)
        if old is not None and not old.terminal:
            raise SupervisorError(f"shard {shard_id} is already {old.state} (pid {old.pid}); stop it first")
        shard = Shard(
            shard_id=shard_id, plan=plan, port=port, api_key=api_key, host=host, model=model, engine=engine,
            gpus=tuple(gpus), weights=weights, start_timeout=start_timeout, meta=dict(meta or {}),
            log_path=self.logs_dir / f"{shard_id}.log", started_at=time.time(), ring=LogRing(self.ring_size),
        )
        self._shards[shard_id] = shard
        try:
            argv = procs.expand_argv(plan.argv, plan.env)
            env = procs.engine_environment({**plan.env, SHARD_ENV: shard_id})
            if self.run_as is not None and not self.run_as.is_self:
                env = as_engine_user(env, self.run_as)
            self._write(shard)  # before the process exists: a crash in between leaves a findable record
            shard._tail = LogTail(shard.log_path, shard.ring, max_bytes=self.log_max_bytes, keep=self.log_keep)
            shard._tail.start_at_end(0)
            header = (f"--- llmgw: starting shard {shard_id} at {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                      f"{' '.join(plan.argv)}\n")
            loop = asyncio.get_running_loop()
            launching = loop.run_in_executor(
                None, lambda: procs.launch(argv, env, shard.log_path, cwd=cwd, header=header, user=self.run_as))
            try:
                shard._popen = await asyncio.shield(launching)
            except asyncio.CancelledError:
                # Cancelled while the process was being made: it exists, so it is
                # recorded and watched all the same, never left running unknown.
                shard._popen = await launching
                self._launched(shard)
                raise
        except LaunchError as exc:
            self._set(shard, FAILED, str(exc))
            shard._exited.set()
            shard._settled.set()
            return shard
        self._launched(shard)
        await self._until_ready(shard, check_ready, deadline=time.monotonic() + start_timeout)
        return shard

    def _launched(self, shard: Shard) -> None:
        assert shard._popen is not None
        pid = shard._popen.pid
        shard.ident = procs.identify(pid) or ProcessIdentity(pid, 0, procs.boot_id())
        self._set(shard, STARTING, f"pid {pid}")
        shard._watch = self._spawn(self._watch(shard), f"watch {shard.shard_id}")

    async def wait_settled(self, shard_id: str) -> Shard:
        """Wait until the shard is no longer starting (ready, failed or stopped)."""
        shard = self._need(shard_id)
        await shard._settled.wait()
        return shard

    # --------------------------------------------------------------- stopping

    async def stop(self, shard_id: str, *, grace: float = 30.0, reason: str = "") -> Shard:
        """SIGTERM to the engine's process group, SIGKILL after `grace` seconds; returns it stopped."""
        shard = self._need(shard_id)
        if shard.terminal:
            return shard
        if shard.ident is None:
            self._set(shard, STOPPED, reason or "stopped before its process started")
            return shard
        if shard.state != STOPPING:
            self._set(shard, STOPPING, reason or f"asked to stop; killed after {grace:g} s")
        if shard._watch is None:  # an adopted shard being stopped before its watch began
            shard._watch = self._spawn(self._watch(shard), f"watch {shard_id}")
        procs.signal_group(shard.ident, signal.SIGTERM)
        try:
            await asyncio.wait_for(shard._exited.wait(), grace)
        except TimeoutError:
            log.warning("engine did not stop within %ss; killing it", grace, extra=_fields(shard))
            shard.message = f"did not stop within {grace:g} s of SIGTERM: killed"
            procs.signal_group(shard.ident, signal.SIGKILL)
            try:
                await asyncio.wait_for(shard._exited.wait(), 10.0)
            except TimeoutError:
                self._set(shard, FAILED, f"pid {shard.pid} survived SIGKILL (stuck in the kernel?)")
        # Workers the engine left in its group go with it.
        procs.signal_group(shard.ident, signal.SIGKILL)
        return shard

    async def stop_all(self, grace: float = 10.0) -> None:
        """Stop every engine (for `llmgw up`; an agent leaving does not)."""
        await asyncio.gather(*(self.stop(s.shard_id, grace=grace) for s in self.shards() if not s.terminal),
                             return_exceptions=True)

    def forget(self, shard_id: str) -> None:
        """Drop a shard that is over, and its record (its log file stays)."""
        shard = self._shards.get(shard_id)
        if shard is None:
            return
        if not shard.terminal:
            raise SupervisorError(f"shard {shard_id} is {shard.state}; stop it before forgetting it")
        del self._shards[shard_id]
        try:
            (self.records_dir / f"{shard_id}.json").unlink()
        except FileNotFoundError:
            pass

    async def close(self) -> None:
        """Stop watching; every engine keeps running for the next agent to adopt."""
        await cancel_and_wait(*self._tasks)
        for shard in self._shards.values():
            if shard._popen is not None and shard._popen.returncode is None:
                # The engine outlives this object: tell subprocess not to warn about it.
                shard._popen.returncode = 0
        if self._http is not None:
            await self._http.close()
            self._http = None

    # --------------------------------------------------------------- adopting

    async def adopt(
        self,
        *,
        check_for: Callable[[Shard], ReadyCheck | None] | None = None,
        answer_timeout: float = 10.0,
    ) -> list[Shard]:
        """Take over the engines the records name: live ones kept running, dead ones reported.

        A live engine that answers is ready at once; one that does not yet is
        waited for in the background (its start timeout counted from when it
        was started). A record whose pid now belongs to another program is an
        engine that has ended.
        """
        found = []
        for path in sorted(self.records_dir.glob("*.json")):
            try:
                shard = Shard.from_record(json.loads(path.read_text()), self.ring_size)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("unreadable shard record %s: %s; left alone", path, exc)
                continue
            if shard.shard_id in self._shards:
                continue
            self._shards[shard.shard_id] = shard
            found.append(shard)
            shard._tail = LogTail(shard.log_path, shard.ring, max_bytes=self.log_max_bytes, keep=self.log_keep)
            shard._tail.start_at_end(self.ring_size)
            if shard.terminal:
                shard._exited.set()
                shard._settled.set()
                continue
            if shard.ident is None:
                shard.ident = procs.find_by_env(SHARD_ENV, shard.shard_id)
            if shard.ident is None or not procs.is_alive(shard.ident):
                self._ended_unwatched(shard)
                continue
            log.info("adopted a running engine", extra=_fields(shard))
            shard._watch = self._spawn(self._watch(shard), f"watch {shard.shard_id}")
            check = check_for(shard) if check_for else None
            if shard.state == STOPPING:
                self._spawn(self.stop(shard.shard_id, grace=10.0), f"stop {shard.shard_id}")
                continue
            if await self._answers(shard, answer_timeout):
                await self._settle_ready(shard, check)
            else:
                left = shard.start_timeout - (time.time() - shard.started_at)
                deadline = time.monotonic() + max(answer_timeout, left)
                if shard.state == READY:
                    self._set(shard, STARTING, "adopted, but it does not answer yet")
                self._spawn(self._until_ready(shard, check, deadline), f"ready {shard.shard_id}")
        return found

    def _ended_unwatched(self, shard: Shard) -> None:
        code = procs.reap(shard.ident.pid) if shard.ident else None
        shard.exit_code = code
        was = shard.state
        why = "its process ended while no agent was watching"
        if shard.ident is not None:
            stat = procs.proc_stat(shard.ident.pid)
            if stat is not None and stat.start_ticks != shard.ident.start_ticks:
                why = f"its process ended while no agent was watching (pid {shard.ident.pid} is another program's now)"
        elif was == STARTING:
            why = "it was being started when the agent stopped, and no process of it is left"
        if code is not None:
            why += f" ({_exit_words(code)})"
        shard._exited.set()
        shard._settled.set()
        self._set(shard, {STOPPING: STOPPED, STARTING: FAILED}.get(was, EXITED), why)

    # --------------------------------------------------------------- watching

    async def _watch(self, shard: Shard) -> None:
        """Follow the output and notice the end of the process, however it came."""
        assert shard.ident is not None
        try:
            while True:
                if shard._tail is not None:
                    shard._tail.poll()
                code = self._exit_code(shard)
                if code is not False:
                    break
                await asyncio.sleep(self.poll_interval)
        except asyncio.CancelledError:
            raise
        if shard._tail is not None:
            shard._tail.flush()
        shard.exit_code = code if isinstance(code, int) else None
        words = _exit_words(shard.exit_code)
        if shard._fail_on_exit is not None:
            self._set(shard, FAILED, shard._fail_on_exit)
        elif shard.state == STOPPING:
            self._set(shard, STOPPED, words)
        elif shard.state == STARTING:
            self._set(shard, FAILED, f"{words} before it was ready")
        elif not shard.terminal:
            self._set(shard, EXITED, words)
        shard._exited.set()
        shard._settled.set()

    def _exit_code(self, shard: Shard) -> int | None | bool:
        """The exit code once ended (None: ended, code unknown), or False while it runs."""
        if shard._popen is not None:
            code = shard._popen.poll()
            return False if code is None else code
        assert shard.ident is not None
        if procs.is_alive(shard.ident):
            return False
        return procs.reap(shard.ident.pid)

    async def _until_ready(self, shard: Shard, check: ReadyCheck | None, deadline: float) -> None:
        while not shard._exited.is_set() and shard.state == STARTING:
            if await self._answers(shard, 0):
                await self._settle_ready(shard, check)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                await self._fail(shard, f"not ready within {shard.start_timeout:g} s: {shard.plan.ready_path} "
                                        f"on port {shard.port} never answered 200")
                return
            try:
                await asyncio.wait_for(shard._exited.wait(), min(self.ready_interval, left))
            except TimeoutError:
                pass
        if shard.state != READY:
            await shard._settled.wait()

    async def _settle_ready(self, shard: Shard, check: ReadyCheck | None) -> None:
        if check is not None:
            reason = check(shard.logs())
            if reason:
                await self._fail(shard, reason)
                return
        if shard.state in (STARTING, READY):
            shard.ready_at = shard.ready_at or time.time()
            self._set(shard, READY, "adopted: it kept serving" if shard.adopted else "")
        shard._settled.set()

    async def _fail(self, shard: Shard, reason: str) -> None:
        """Stop the engine and call it failed, with `reason` as the message."""
        log.error("engine failed: %s", reason, extra=_fields(shard))
        shard._fail_on_exit = reason
        await self.stop(shard.shard_id, grace=10.0, reason=reason)
        if not shard.terminal:
            self._set(shard, FAILED, reason)
        shard._settled.set()

    async def _answers(self, shard: Shard, within: float) -> bool:
        """Whether the engine answers 200 on its ready path, trying for up to `within` seconds.

        A plan without a ready path (a worker rank of a replica over several nodes, which serves no
        HTTP) answers for as long as its process runs."""
        if not shard.plan.ready_path:
            return not shard._exited.is_set()
        url = f"http://{_host_for_url(shard.host)}:{shard.port}{shard.plan.ready_path}"
        headers = {"Authorization": f"Bearer {shard.api_key}"} if shard.api_key else {}
        deadline = time.monotonic() + within
        while True:
            try:
                async with self._client().get(url, headers=headers, allow_redirects=False) as response:
                    if response.status == 200:
                        return True
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() >= deadline or shard._exited.is_set():
                return False
            await asyncio.sleep(self.ready_interval)

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3.0), trust_env=False)
        return self._http

    # --------------------------------------------------------------- bookkeeping

    def _set(self, shard: Shard, state: str, message: str = "") -> None:
        shard.state = state
        shard.message = message
        try:
            self._write(shard)
        except OSError as exc:
            log.error("could not write the record of shard %s: %s", shard.shard_id, exc)
        log.info("shard %s: %s%s", shard.shard_id, state, f" ({message})" if message else "", extra=_fields(shard))
        if self.on_change is not None:
            try:
                self.on_change(shard)
            except Exception:  # a listener's bug must not stop supervision
                log.exception("a shard listener failed")

    def _write(self, shard: Shard) -> None:
        write_atomic(self.records_dir / f"{shard.shard_id}.json", json.dumps(shard.record(), indent=1).encode(),
                     mode=0o600)

    def _need(self, shard_id: str) -> Shard:
        shard = self._shards.get(shard_id)
        if shard is None:
            raise SupervisorError(f"no shard {shard_id} on this node")
        return shard

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `path` whole or not at all: a temporary file beside it, synced, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _exit_words(code: int | None) -> str:
    if code is None:
        return "ended (its exit code is unknown: an earlier agent started it)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"


def _host_for_url(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _fields(shard: Shard) -> dict[str, Any]:
    return {"fields": {"shard_id": shard.shard_id, "pid": shard.pid, "port": shard.port, "engine": shard.engine}}


def shard_ids(shards: Iterable[Shard]) -> list[str]:
    return [s.shard_id for s in shards]
