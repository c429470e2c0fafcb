"""`llmgw doctor`: is this machine's llmgw healthy? Each finding one sentence, each problem with what to do.

Which checks run follows from <root>/etc/llmgw: server.yaml makes it a
control plane, agent.yaml a node (both: both). A control plane: its
service, every listener (listening and connectable), its certificates and
their expiry, the store and its schema version (a PostgreSQL store: each member's role, state and
lag, as its primary sees them), the firewall table. A node:
its service, its certificate, each control plane reachable and the clock's
skew to it, the GPU driver, the engines found and the disk free for weights.

`ok` and `warn` leave the exit status 0; a `problem` makes it 1.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import os
import shutil
import socket
import ssl
import subprocess
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from llmgw.install import firewall
from llmgw.install.layout import Layout
from llmgw.install.service import service_running, systemd_runs

__all__ = ["Finding", "run_checks", "CERT_WARN_DAYS", "SKEW_PROBLEM_SECONDS", "WEIGHTS_WARN_BYTES"]

CERT_WARN_DAYS = 30
SKEW_PROBLEM_SECONDS = 10.0
WEIGHTS_WARN_BYTES = 20 * 1024**3
OK, WARN, PROBLEM = "ok", "warn", "problem"


@attrs.frozen
class Finding:
    check: str
    status: str  #: ok, warn or problem
    message: str

    def to_json(self) -> dict[str, str]:
        return attrs.asdict(self)


def _start_hint(layout: Layout, role: str) -> str:
    if systemd_runs(layout):
        return f"`systemctl start llmgw-{role}`, and `journalctl -u llmgw-{role}` says why it stopped"
    return f"start it again (`llmgw server init{'' if layout.system else f' --root {layout.root}'} --yes ...`), " \
           f"and read {layout.log_file(role)} for why it stopped"


def _dial_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host.strip("[]")


def _connectable(host: str, port: int, timeout: float = 2.0) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _service(layout: Layout, role: str) -> Finding:
    if service_running(layout, role):
        return Finding(f"service {role}", OK, f"llmgw {role} is running")
    return Finding(f"service {role}", PROBLEM, f"llmgw {role} is not running; {_start_hint(layout, role)}")


def _listeners(layout: Layout, config, running: bool) -> list[Finding]:
    from llmgw.config.validate import split_address

    out = []
    for key, what in (("listen", "client API"), ("admin_listen", "admin API"), ("agent_listen", "agent port"),
                      ("metrics_listen", "metrics listener")):
        address = getattr(config, key)
        if not address:
            continue
        host, port = split_address(address)
        dial = _dial_host(host)
        failure = _connectable(dial, port)
        if failure is None:
            out.append(Finding(f"port {key}", OK, f"the {what} answers on {dial}:{port}"))
        else:
            hint = ("llmgw server is not running (see above)" if not running else
                    f"llmgw server runs but does not listen there: is {address} what server.yaml says, and free?")
            out.append(Finding(f"port {key}", PROBLEM,
                               f"the {what} ({address}) cannot be reached on {dial}:{port} ({failure}); {hint}"))
    return out


def _certificate(label: str, path: str, now: dt.datetime) -> Finding:
    from llmgw.pki import PkiError, describe, load_certificate

    try:
        info = describe(load_certificate(path), now=now)
    except PkiError as exc:
        return Finding(f"certificate {label}", PROBLEM, f"{exc}; issue it again with `llmgw ctl cert`")
    days = info["days_left"]
    until = info["not_after"][:10]
    if info["expired"]:
        return Finding(f"certificate {label}", PROBLEM,
                       f"{path} expired on {until}; issue a new one with `llmgw ctl cert` and restart the service")
    if days < CERT_WARN_DAYS:
        return Finding(f"certificate {label}", WARN,
                       f"{path} expires in {days} days ({until}); issue a new one with `llmgw ctl cert` soon")
    return Finding(f"certificate {label}", OK, f"{path} is valid until {until} ({days} days)")


async def _store(config) -> Finding | list[Finding]:
    from llmgw.store import StoreError, open_store

    dsn = config.store.dsn.reveal()
    try:
        store = await asyncio.wait_for(open_store(dsn), timeout=20)
    except (StoreError, OSError, asyncio.TimeoutError) as exc:
        return Finding("store", PROBLEM, f"the store ({config.store.backend}) cannot be opened: {exc or type(exc).__name__}; "
                       "check store.dsn in server.yaml and that the database runs")
    try:
        found = Finding("store", OK, f"the store ({store.dialect}) answers, schema version {store.schema_version}")
        if store.dialect == "postgres":
            return [found, await _store_members(store, dsn)]
        return found
    finally:
        await store.close()


async def _store_members(store, dsn: str) -> Finding:
    """A PostgreSQL store's members as its primary sees them (pg_stat_replication): each one's role, state and lag."""
    from llmgw.obs.store_metrics import _replication, address_members

    try:
        members, lags = await store._read(_replication)
    except Exception as exc:  # noqa: BLE001 - a finding, not a crash
        return Finding("store members", WARN, f"the store's replication cannot be read: {exc}")
    behind = dict(lags)
    parts = []
    for name, host, role, state in members:
        lag = behind.get(name)
        said = f"{role} {name}" + (f" ({host})" if host not in (name, "unknown") else "") + f" {state}"
        if lag is not None:
            said += ", lag unknown (grant the store's role pg_monitor)" if lag < 0 else f", {int(lag)} bytes behind"
        parts.append(said)
    text = "; ".join(parts)
    replicas = [m for m in members if m[2] == "replica"]
    if members and members[0][2] == "replica":
        return Finding("store members", WARN, f"{text}: the store is a standby in recovery; llmgw writes to the "
                       "primary: list every member in store.dsn with target_session_attrs=read-write")
    named = address_members(dsn)
    if named > 1 and len(replicas) < named - 1:
        return Finding("store members", WARN, f"{text}: store.dsn names {named} members but the primary sees "
                       f"{len(replicas)} standby(s); `patronictl -c /etc/llmgw/patroni/patroni.yml list` on a "
                       "member says which is missing")
    lagging = [m for m in replicas if m[3] != "streaming"]
    if lagging:
        return Finding("store members", WARN, f"{text}: {lagging[0][0]} is not streaming; its PostgreSQL log "
                       "says why")
    return Finding("store members", OK, text)


def _firewall(layout: Layout) -> Finding | None:
    if not layout.system:
        if layout.nft.exists():
            return Finding("firewall", OK, f"{layout.nft} is written (a --root install: not applied here)")
        return Finding("firewall", WARN, f"{layout.nft} is missing; `llmgw server init` writes it")
    if shutil.which("nft") is None:
        return Finding("firewall", WARN, "nft is not installed, so llmgw's ports are not closed off; "
                       "apt-get install nftables, then `nft -f /etc/nftables.d/llmgw.nft`")
    if firewall.table_applied():
        return Finding("firewall", OK, f"the table {firewall.TABLE} is applied")
    return Finding("firewall", WARN, f"the table {firewall.TABLE} is not applied; `nft -f {layout.nft}` applies it "
                   "(and include it from /etc/nftables.conf to keep it across reboots)")


async def _skew(address: str, tls: ssl.SSLContext | None) -> Finding:
    import aiohttp

    parts = urllib.parse.urlsplit(address if "://" in address else f"https://{address}")
    url = f"{parts.scheme}://{parts.netloc}/agent/v1"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            async with http.get(url, ssl=tls if parts.scheme == "https" else None) as resp:
                date = resp.headers.get("Date")
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        cause = getattr(exc, "os_error", None)
        why = (cause.strerror if cause is not None and cause.strerror else None) or type(exc).__name__
        return Finding(f"control plane {parts.netloc}", PROBLEM,
                       f"{parts.netloc} cannot be reached ({why}); check the address in "
                       "agent.yaml, that the control plane runs, and the firewall between them")
    if not date:
        return Finding(f"clock {parts.netloc}", WARN, f"{parts.netloc} answers without a Date header; skew unknown")
    theirs = email.utils.parsedate_to_datetime(date)
    skew = abs((dt.datetime.now(dt.timezone.utc) - theirs).total_seconds())
    if skew > SKEW_PROBLEM_SECONDS:
        return Finding(f"clock {parts.netloc}", PROBLEM,
                       f"this clock is {skew:.0f} s off {parts.netloc}'s; certificates and leases need clocks "
                       "within seconds: turn NTP on (timedatectl set-ntp true) on both")
    return Finding(f"clock {parts.netloc}", OK, f"{parts.netloc} answers; clocks within {max(skew, 1):.0f} s")


def _gpus() -> Finding:
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pynvml's own notice that nvidia-ml-py succeeds it
            import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        return Finding("gpu", OK, f"NVIDIA driver {driver}, {count} GPU{'s' if count != 1 else ''}")
    except Exception:  # no library, no driver, no device: said below
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        if done.returncode == 0:
            return Finding("gpu", OK, f"nvidia-smi lists {len(done.stdout.splitlines())} GPU(s)")
        return Finding("gpu", PROBLEM, f"nvidia-smi is installed but fails: {done.stderr.strip() or done.stdout.strip()}; "
                       "reinstall the NVIDIA driver, or reboot after an upgrade of it")
    return Finding("gpu", OK, "no NVIDIA driver: a CPU node (CPU engines such as llamacpp and sim run here)")


def _engines(agent) -> Finding:
    from llmgw.agent.engines import NodeEngines
    from llmgw.plugins.manager import PluginError, load_plugins

    try:
        plugins = load_plugins()
    except PluginError as exc:
        return Finding("engines", PROBLEM, f"{exc}")
    found = NodeEngines(plugins.engines(), agent.engines_dir).installed()
    ready = sorted({f"{e.name} {e.version}" for e in found if e.version})
    missing = sorted({e.name for e in found if not e.version} - {e.name for e in found if e.version})
    if not ready:
        return Finding("engines", WARN, f"no engine is installed yet ({', '.join(missing)} can be); "
                       "the control plane installs one when a model needs it")
    return Finding("engines", OK, f"found {', '.join(ready)}" + (f"; not installed: {', '.join(missing)}" if missing else ""))


def _disk(path: str) -> Finding:
    p = Path(path)
    while not p.exists():
        p = p.parent
    usage = shutil.disk_usage(p)
    free_gib = usage.free / 1024**3
    if usage.free < WEIGHTS_WARN_BYTES:
        return Finding("disk", WARN, f"{path}: {free_gib:.1f} GiB free for weights; a 7B model wants ~15 GiB: "
                       "give weights_dir a larger disk in agent.yaml")
    return Finding("disk", OK, f"{path}: {free_gib:.0f} GiB free for weights")


def _role_config(out: list[Finding], role: str, path: Path, load: Callable[[Path], Any], check: str) -> Any:
    """The role this file makes the machine, then the file loaded; None, with a problem naming the command
    (`check` PATH) that lists each of its problems, when it does not load."""
    from llmgw.config import ConfigError

    out.append(Finding("role", OK, f"{role} ({path})"))
    try:
        return load(path)
    except (ConfigError, OSError) as exc:
        out.append(Finding(path.name, PROBLEM, f"{exc}; `{check} {path}` lists each problem"))
        return None


async def run_checks(layout: Layout) -> list[Finding]:
    """Every finding for this machine, in the order they are printed."""
    from llmgw.config import load_agent_config, load_server_config

    now = dt.datetime.now(dt.timezone.utc)
    out: list[Finding] = []
    server_yaml, agent_yaml = layout.server_yaml, layout.agent_yaml
    if not server_yaml.exists() and not agent_yaml.exists():
        return [Finding("role", PROBLEM, f"neither {server_yaml} nor {agent_yaml} exists: llmgw is not installed "
                        f"here; `llmgw server init` makes a control plane, `llmgw join CODE` a node")]
    if server_yaml.exists():
        config = _role_config(out, "a control plane", server_yaml, load_server_config, "llmgw config check")
        if config is not None:
            service = _service(layout, "server")
            out.append(service)
            out += _listeners(layout, config, service.status == OK)
            if not config.agent_insecure:
                out.append(_certificate("server", config.agent_tls.cert, now))
                out.append(_certificate("ca", config.agent_tls.ca, now))
            stored = await _store(config)
            out += stored if isinstance(stored, list) else [stored]  # a PostgreSQL store: its members too
            if config.limits.shared:  # shared limits: the Redis every worker and gateway counts in
                from llmgw.accounting.limits_redis import probe

                ok, text = await probe(config.limits)
                out.append(Finding("limits store", OK if ok else PROBLEM, text))
            fw = _firewall(layout)
            if fw:
                out.append(fw)
            from llmgw.backup.advice import backup_advice  # encrypted, copied off the machine, on a schedule

            out += [Finding("backup", status, text) for status, text in backup_advice(config)]
    if agent_yaml.exists():
        agent = _role_config(out, "a node", agent_yaml, load_agent_config, "llmgw config check --agent")
        if agent is not None:
            out.append(_service(layout, "agent"))
            tls = None
            if not agent.insecure:
                out.append(_certificate("node", agent.tls.cert, now))
                try:
                    from llmgw.pki import ssl_client_context

                    tls = ssl_client_context(agent.tls.cert, agent.tls.key, agent.tls.ca)
                except (OSError, ValueError, ssl.SSLError) as exc:
                    out.append(Finding("certificate node", PROBLEM, f"the node's TLS files cannot be used: {exc}"))
            for address in agent.control_planes:
                out.append(await _skew(address, tls))
            loop = asyncio.get_running_loop()
            out.append(await loop.run_in_executor(None, _gpus))
            out.append(await loop.run_in_executor(None, _engines, agent))
            out.append(_disk(agent.weights_dir))
    return out


def summary(findings: list[Finding]) -> dict[str, Any]:
    problems = [f for f in findings if f.status == PROBLEM]
    return {"ok": not problems, "problems": len(problems),
            "warnings": sum(f.status == WARN for f in findings),
            "findings": [f.to_json() for f in findings], "host": socket.gethostname(),
            "checked_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
