"""The processes a gateway benchmark runs: a sim engine, `llmgw server`, LiteLLM's proxy.

Each runs as its own process, as in production, with its output in a log
file of the benchmark's temporary directory (shown when it fails to start).
Memory and CPU are read from /proc for the process and its children, so a
proxy that forks workers is measured whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import time
from pathlib import Path

import aiohttp
import attrs
from ruamel.yaml import YAML

from llmgw.buildinfo import self_command

#: How long a process may take to answer its health check: LiteLLM's proxy is slow to start.
START_TIMEOUT = 180.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class StartFailed(RuntimeError):
    """A process did not come up; the message ends with the tail of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return text[text.rindex(")") + 2:].split()


def tree(pid: int) -> list[int]:
    """`pid` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def rss_mb(pid: int) -> float | None:
    """Resident memory of `pid` and its descendants, in MiB; None when it is gone."""
    total = 0
    seen = False
    for p in tree(pid):
        try:
            pages = int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        seen = True
        total += pages * _PAGE
    return round(total / 2**20, 1) if seen else None


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of `pid` and its living descendants."""
    ticks = 0
    for p in tree(pid):
        fields = _stat_fields(p)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _TICK


@contextlib.contextmanager
def quiet_llmgw_logs():
    """Warnings and worse only from llmgw's loggers in this process while a benchmark runs
    (a gateway in process logs a line per request), unless debugging was asked for."""
    logger = logging.getLogger("llmgw")
    before = logger.level
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(before)


# ---------------------------------------------------------------- children


@attrs.define
class Child:
    """A process the benchmark started, and where it answers."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path
    url: str  # base URL, without /v1

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float | None:
        return rss_mb(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def stop(self, grace: float = 10.0) -> None:
        if self.proc.returncode is not None:
            return
        pids = tree(self.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        for pid in pids[1:]:  # workers a proxy forked and left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


async def _spawn(name: str, argv: list[str], workdir: Path, url: str, env: dict | None = None) -> Child:
    log = workdir / f"{name}.log"
    handle = open(log, "ab")  # noqa: SIM115 - the child holds it; closed below once it is passed
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=handle, stderr=handle,
            env={**os.environ, **(env or {})}, start_new_session=True)
    finally:
        handle.close()
    return Child(name, proc, log, url)


async def wait_ready(child: Child, path: str, timeout: float = START_TIMEOUT,
                     headers: dict | None = None) -> None:
    """Poll `child.url + path` until it answers 200; StartFailed when the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while time.monotonic() < deadline:
            if child.proc.returncode is not None:
                raise StartFailed(f"{child.name} exited with status {child.proc.returncode}:\n{child.log_tail()}")
            try:
                async with http.get(child.url + path, headers=headers or {}) as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
    await child.stop()
    raise StartFailed(f"{child.name} did not answer {path} within {timeout:.0f} s:\n{child.log_tail()}")


async def start_sim_engine(workdir: Path, *, model: str, ttft: float, tpot: float,
                           prefill_per_token: float = 0.0, max_num_seqs: int = 4096,
                           extra: tuple[str, ...] = (), name: str = "sim-engine") -> Child:
    """`llmgw sim-engine` on a port it picks itself; its URL read from its first line.
    `extra` adds flags (--kv-cache-blocks, --seed, …)."""
    argv = [*self_command(), "--log-level", "warning", "sim-engine", "--model", model, "--port", "0",
            "--ttft", repr(ttft), "--tpot", repr(tpot), "--prefill-per-token", repr(prefill_per_token),
            "--max-num-seqs", str(max_num_seqs), *extra]
    child = await _spawn(name, argv, workdir, "")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in child.log.read_text(errors="replace").splitlines():
            if line.startswith("listening on "):
                child.url = line.removeprefix("listening on ").strip()
                await wait_ready(child, "/health")
                return child
        if child.proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    await child.stop()
    raise StartFailed(f"sim-engine did not say where it listens:\n{child.log_tail()}")


# ---------------------------------------------------------------- llmgw server


def server_yaml(*, listen: str, db: Path, engine_url: str, model: str, keys: bool, concurrency: int) -> dict:
    """server.yaml for one model served by one engine: a gateway only (no scheduler, no metrics
    listener); the admin API, which cannot be turned off, on a free loopback port."""
    return {
        "listen": listen,
        "metrics_listen": "",
        "admin_listen": f"127.0.0.1:{free_port()}",
        "admin_token_file": str(db.parent / "admin-token"),
        "control": {"enabled": False},
        "store": {"dsn": str(db)},
        "auth": {"keys_required": keys},
        "admission": {"queue_depth": max(256, concurrency * 4)},
        "models": [{"name": model, "concurrency": max(64, concurrency * 2),
                    "endpoints": [{"url": engine_url + "/v1"}]}],
    }


async def make_key(db: Path, model: str) -> str:
    """A service key in a fresh store, with limits and a budget set high enough never to refuse,
    so the key lookup, the limit checks and the budget hold all run on every request."""
    from llmgw.auth.tenancy import Tenancy
    from llmgw.store import open_store

    store = await open_store(str(db))
    try:
        tenancy = Tenancy(store, actor="llmgw bench")
        await tenancy.create("bench")
        await tenancy.create("bench/load", project=True)
        issued = await tenancy.create_key(project="bench/load", name="bench", models=[model])
        await tenancy.set_limits(await tenancy.scope("project:bench/load"), rpm=10**9, tpm=10**12,
                                 budget_micros=10**15, budget_period="month")
        return issued.secret
    finally:
        await store.close()


async def start_gateway(workdir: Path, *, engine_url: str, model: str, keys: bool, concurrency: int,
                        log_level: str = "info", workers: int = 1, limits_store: str = "") -> tuple[Child, str | None]:
    """`llmgw server` with a generated server.yaml (and, with keys, a store holding one key); `workers` > 1
    with `limits_store` (a Redis) serves from that many processes, all of them listening before this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "llmgw.db"
    secret = await make_key(db, model) if keys else None
    for attempt in range(3):  # another process may take the free port first
        port = free_port()
        config = workdir / "server.yaml"
        with open(config, "w") as f:
            YAML(typ="safe", pure=True).dump(server_yaml(listen=f"127.0.0.1:{port}", db=db, engine_url=engine_url,
                                                         model=model, keys=keys, concurrency=concurrency)
                                             | ({"workers": workers, "limits": {"store": limits_store}}
                                                if workers > 1 else {}), f)
        argv = [*self_command(), "--log-level", log_level, "server", "--config", str(config)]
        child = await _spawn("llmgw-server", argv, workdir, f"http://127.0.0.1:{port}")
        try:
            await wait_ready(child, "/ready", timeout=60)
            deadline = time.monotonic() + 60  # workers: every one of them listening
            while child.log.read_text(errors="replace").count("client API listening") < workers:
                if time.monotonic() > deadline:
                    raise StartFailed(f"not every one of {workers} workers listened within 60 s:\n{child.log_tail()}")
                await asyncio.sleep(0.2)
            return child, secret
        except StartFailed:
            if attempt == 2 or "cannot listen" not in child.log_tail():
                raise
    raise AssertionError("unreachable")


async def start_redis(workdir: Path) -> tuple[Child, str]:
    """Debian's redis-server on a free loopback port, nothing kept on disk: the shared limits of several workers."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise StartFailed("--workers: redis-server is not installed (apt-get install redis-server); workers share "
                          "their limits through it")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(workdir)]
    child = await _spawn("redis", argv, workdir, f"redis://127.0.0.1:{port}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return child, f"redis://127.0.0.1:{port}/0"
        except OSError:
            await asyncio.sleep(0.05)
    await child.stop()
    raise StartFailed(f"redis-server did not listen within 10 s:\n{child.log_tail()}")


# ---------------------------------------------------------------- LiteLLM


def litellm_yaml(*, engine_url: str, model: str, master_key: str | None) -> dict:
    """LiteLLM proxy's config: one OpenAI-compatible deployment, the same engine as llmgw's."""
    config: dict = {
        "model_list": [{
            "model_name": model,
            "litellm_params": {"model": f"openai/{model}", "api_base": engine_url + "/v1", "api_key": "none"},
        }],
        "litellm_settings": {"telemetry": False},
    }
    if master_key:
        config["general_settings"] = {"master_key": master_key}
    return config


async def start_litellm(command: str, workdir: Path, *, engine_url: str, model: str,
                        keys: bool) -> tuple[Child, str | None]:
    """LiteLLM's proxy (`litellm --config …`), one worker; with keys, a master key it checks."""
    if shutil.which(command) is None:
        raise StartFailed(f"--litellm {command}: no such command; give the `litellm` of an installed LiteLLM "
                          "proxy (pip install 'litellm[proxy]' into an environment of its own)")
    master_key = f"sk-bench-{secrets.token_hex(8)}" if keys else None
    config = workdir / "litellm.yaml"
    with open(config, "w") as f:
        YAML(typ="safe", pure=True).dump(litellm_yaml(engine_url=engine_url, model=model, master_key=master_key), f)
    port = free_port()
    argv = [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    env = {"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "NO_DOCS": "True"}
    child = await _spawn("litellm", argv, workdir, f"http://127.0.0.1:{port}", env=env)
    await wait_ready(child, "/health/liveliness")
    return child, master_key
