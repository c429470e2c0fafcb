"""`workers: N`: N processes serving the client API on one port (SO_REUSEPORT), the first one doing everything else.

The process `llmgw server` starts (worker 0) runs as with one worker — the
control plane (leadership, the reconciler, the agent port), the admin API,
the catalog follow — and serves clients on `listen`
with SO_REUSEPORT set, so the kernel spreads new connections over every
process listening there. It starts N-1 more (`WorkerPool`): the same
program (`llmgw.pyz server --config …`, or `python -m llmgw …`) with
`LLMGW_WORKER=i` in their environment, which makes `llmgw.server.run` serve
the client API only there (no control plane or admin API; their own metrics
on metrics_listen's port + i).

What those need of worker 0 comes down their standard input, a frame
(4-byte length, pickle) each time it changes, checked twice a second: the
router's replica set (which replicas serve which model, where, with which
engine key) and the models it serves (server.yaml's and those added at run
time). Each worker keeps its own health and load of each replica, and sends
each replica only its part of the replica's concurrency (`share_of`: the
parts add up to it), so all of them together never send a replica more.
Back up a pipe of its own (LLMGW_WORKER_USE_FD) each worker tells worker 0
twice a second which replicas it used (`use_report`, `take_use`): the
reconciler's idle reckoning reads worker 0's replicas, so a model used only
through another worker is not stopped as idle. When the
pipe ends (worker 0 gone), a worker finishes its requests and stops; when a
worker exits, worker 0 starts it again within a second or so.

RPM, TPM and budget holds are counted across them by limits.store (a Redis;
the configuration refuses `workers` > 1 without one); usage rows go from
each to the store, each with its own usage journal (`worker-I/` in the
state folder).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import struct
import sys
import time

import attrs

from llmgw.obs import logs

log = logs.get("llmgw.server.workers")

#: The environment variable that makes `llmgw server` a worker (its index, 1 or more).
WORKER_ENV = "LLMGW_WORKER"
#: The file descriptor a worker reports its use of the replicas on (``use_report``), to worker 0.
USE_FD_ENV = "LLMGW_WORKER_USE_FD"
#: How often worker 0 looks for a change to send (seconds).
FEED_EVERY_S = 0.5
#: A worker that exits is started again after this long (seconds), longer if it keeps exiting at once.
RESTART_AFTER_S = 0.5
# room: each process links its own replicas into a shared room (from shares_with)
_LIVE_STATE = frozenset({"in_flight", "health", "load", "last_chosen", "served", "room"})


def worker_index() -> int:
    """This process's worker number: 0 for the one `llmgw server` started, else LLMGW_WORKER."""
    try:
        return max(0, int(os.environ.get(WORKER_ENV, "0")))
    except ValueError:
        return 0


def share_of(index: int, count: int):
    """Worker ``index``'s part of a replica's concurrency among ``count`` workers: the parts add up to it exactly
    (at least 1 each, so a replica of concurrency below ``count`` may get up to ``count`` at once)."""

    def share(concurrency: int) -> int:
        base, extra = divmod(concurrency, count)
        return max(1, base + (1 if index < extra else 0))

    return share


def take_share(index: int, count: int) -> None:
    """This process sends each replica only its part of the replica's concurrency (llmgw.router.replicas)."""
    from llmgw.router import replicas

    replicas.concurrency_share = share_of(index, count) if count > 1 else None


def snapshot(gateway) -> bytes:
    """What a worker needs of worker 0's router: its replicas (without live state) and the models it serves."""
    replicas = [{f.name: getattr(r, f.name) for f in attrs.fields(type(r)) if f.name not in _LIVE_STATE}
                for r in sorted(gateway.replicas, key=lambda r: r.id)]
    models = list(getattr(gateway.catalog, "configs", []))
    return pickle.dumps({"replicas": replicas, "models": models, "declared_only": gateway.catalog.declared_only,
                         "leader": leader_answer(gateway),
                         # why none serves (a standby whose copy of the leader's replicas is stale), said by all
                         "unavailable_reason": getattr(gateway.replicas, "unavailable_reason", "")})


def leader_answer(gateway) -> tuple[dict, int] | None:
    """What worker 0's GET /leader answers now (body, status); None without a control plane in the process."""
    slot = getattr(gateway, "control", None)
    if slot is None:
        return None
    plane = getattr(slot, "plane", None)
    if plane is None:
        return ({"leader": False, "holder": None, "epoch": 0,
                 "error": slot.disabled_reason or "the control plane is not running"}, 503)
    info = plane.leadership.describe()
    return info, 200 if info["leader"] else 503


#: a worker: worker 0's last GET /leader answer, which the worker's own GET /leader gives
_leader_seen: tuple[dict, int] | None = None


def serve_leader(app) -> None:
    """A worker's GET /leader: worker 0's answer, as of its last view (half a second old at most)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        seen = _leader_seen
        if seen is None:
            return web.json_response({"leader": False, "holder": None, "epoch": 0,
                                      "error": "this worker has no word from worker 0 yet"}, status=503)
        return web.json_response(seen[0], status=seen[1])

    app.router.add_get("/leader", handle)


def use_report(gateway, since: float) -> dict[str, float]:
    """A worker's use of the replicas since ``since`` (monotonic): for each replica it sent a request to, how
    many seconds ago (0: one is in flight now)."""
    now = time.monotonic()
    return {r.id: 0.0 if r.in_flight > 0 else max(0.0, now - r.last_chosen)
            for r in gateway.replicas if r.in_flight > 0 or r.last_chosen > since}


def take_use(gateway, frame: bytes) -> None:
    """Worker 0: a worker's ``use_report`` counted as use of worker 0's own replicas (``last_chosen``), so the
    reconciler's idle reckoning (and a standby's report to the leader) sees the requests every worker sent."""
    now = time.monotonic()
    for rid, ago in pickle.loads(frame).items():  # noqa: S301 - from our own worker, over a pipe we made
        replica = gateway.replicas.get(rid)
        if replica is not None:
            replica.last_chosen = max(replica.last_chosen, now - float(ago))


def apply(gateway, frame: bytes) -> None:
    """Make a worker's router what worker 0's is (``snapshot``)."""
    from llmgw.router.replicas import Replica

    global _leader_seen
    view = pickle.loads(frame)  # noqa: S301 - from our own parent process, over a pipe only it holds
    if view.get("leader") is not None:
        _leader_seen = view["leader"]
    gateway.catalog.set_models(view["models"], declared_only=view["declared_only"])
    gateway.replicas.unavailable_reason = view.get("unavailable_reason", "")
    wanted = {r["id"]: r for r in view["replicas"]}
    for replica in list(gateway.replicas):
        if replica.id not in wanted or wanted[replica.id]["model"] != replica.model:
            gateway.replicas.remove(replica.id)
    for rid, fields in wanted.items():
        current = gateway.replicas.get(rid)
        if current is None:
            gateway.replicas.add(Replica(**fields))
            continue
        changes = {k: v for k, v in fields.items() if k not in ("id", "model") and getattr(current, k) != v}
        if changes:
            gateway.replicas.update(rid, **changes)


class WorkerPool:
    """Worker 0's other workers: started, fed, started again when one exits, stopped at shutdown."""

    def __init__(self, gateway, *, count: int, config_path: str | None, drain_seconds: float) -> None:
        if not config_path:
            raise ValueError(f"workers: {count} needs the server.yaml the other workers read (llmgw server --config)")
        self.gateway = gateway
        self.count = count
        self.config_path = config_path
        self.drain_seconds = drain_seconds
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.restarts = 0  #: workers started again after they exited
        self._stopping = False
        self._frame = b""
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        take_share(0, self.count)
        self._frame = snapshot(self.gateway)
        for index in range(1, self.count):
            self._tasks.append(asyncio.ensure_future(self._keep(index)))
        self._tasks.append(asyncio.ensure_future(self._feed()))

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        from llmgw.buildinfo import self_command

        use_r, use_w = os.pipe()  # the worker's use of the replicas, back to worker 0
        env = dict(os.environ, **{WORKER_ENV: str(index), USE_FD_ENV: str(use_w)})
        try:
            proc = await asyncio.create_subprocess_exec(
                *self_command(), "server", "--config", self.config_path,  # this same program: the zipapp, or -m llmgw
                stdin=asyncio.subprocess.PIPE, env=env, pass_fds=(use_w,),
                start_new_session=True)  # a terminal's Ctrl-C: worker 0's to pass on
        finally:
            os.close(use_w)
        self._tasks.append(asyncio.ensure_future(self._read_use(use_r)))
        self.procs[index] = proc
        await self._send(proc, self._frame)
        logs.event(log, "worker started", worker=index, pid=proc.pid)
        return proc

    async def _keep(self, index: int) -> None:
        pause = RESTART_AFTER_S
        while not self._stopping:
            started = asyncio.get_running_loop().time()
            proc = await self._spawn(index)
            code = await proc.wait()
            if self._stopping:
                return
            self.restarts += 1
            logs.event(log, "worker exited; starting it again", logging.WARNING, worker=index, pid=proc.pid,
                       exit_code=code)
            ran = asyncio.get_running_loop().time() - started
            pause = RESTART_AFTER_S if ran > 30 else min(30.0, pause * 2 if ran < 5 else RESTART_AFTER_S)
            await asyncio.sleep(pause)

    async def _read_use(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", buffering=0))
        try:
            while True:
                size = struct.unpack(">I", await reader.readexactly(4))[0]
                take_use(self.gateway, await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            pass  # the worker exited
        finally:
            transport.close()

    async def _feed(self) -> None:
        while not self._stopping:
            await asyncio.sleep(FEED_EVERY_S)
            try:
                frame = snapshot(self.gateway)
            except Exception:  # noqa: BLE001 - the next look tries again
                log.exception("the workers' view of the replicas could not be made")
                continue
            if frame != self._frame:
                self._frame = frame
                for proc in list(self.procs.values()):
                    await self._send(proc, frame)

    @staticmethod
    async def _send(proc: asyncio.subprocess.Process, frame: bytes) -> None:
        if proc.stdin is None or proc.returncode is not None:
            return
        try:
            proc.stdin.write(struct.pack(">I", len(frame)) + frame)
            await proc.stdin.drain()
        except (ConnectionError, BrokenPipeError):
            pass  # it exited: _keep starts it again and sends it the view then

    async def stop(self) -> None:
        """SIGTERM to every worker; they finish their requests (drain_seconds), then are killed."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        live = [p for p in self.procs.values() if p.returncode is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)), self.drain_seconds + 5)
        except TimeoutError:
            for proc in live:
                if proc.returncode is None:
                    proc.kill()
            await asyncio.gather(*(p.wait() for p in live))


async def start_following(app, stop: asyncio.Event, *, within: float = 30.0) -> None:
    """A worker, before it listens: follow worker 0's view (``follow_parent``), waiting for the first one."""
    from llmgw.router.gateway import GATEWAY

    take_share(worker_index(), app[GATEWAY].config.workers)
    if os.environ.get(USE_FD_ENV, "").isdigit():
        asyncio.ensure_future(_report_use(app[GATEWAY], int(os.environ[USE_FD_ENV]), stop))
    ready = asyncio.Event()
    task = asyncio.ensure_future(follow_parent(app[GATEWAY], stop, ready))
    asyncio.ensure_future(_cancel_on(stop, task))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait([waiter, task], timeout=within, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()
    if not ready.is_set():
        raise RuntimeError(f"worker {worker_index()}: no view of the replicas came from worker 0 within {within:g} s")


async def _cancel_on(stop: asyncio.Event, task: asyncio.Task) -> None:
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _report_use(gateway, fd: int, stop: asyncio.Event) -> None:
    """A worker: its use of the replicas to worker 0 (``take_use``), twice a second while it sent any."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(fd, "wb", buffering=0))
    since = time.monotonic()
    try:
        while not stop.is_set():
            await asyncio.sleep(FEED_EVERY_S)
            now = time.monotonic()
            used = use_report(gateway, since)
            since = now
            if used and not transport.is_closing():
                frame = pickle.dumps(used)
                transport.write(struct.pack(">I", len(frame)) + frame)
    finally:
        transport.close()


async def follow_parent(gateway, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
    """A worker: apply each view worker 0 sends; set ``stop`` when the pipe ends (worker 0 gone)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while True:
            size = struct.unpack(">I", await reader.readexactly(4))[0]
            apply(gateway, await reader.readexactly(size))
            if ready is not None:
                ready.set()
    except asyncio.IncompleteReadError:
        logs.event(log, "worker 0 is gone; stopping", logging.WARNING, worker=worker_index())
    finally:
        stop.set()
