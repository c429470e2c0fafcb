"""`llmgw server init`: a control plane on a bare machine, every field checked before anything is written.

The steps, each one sentence on the way:

1. check every field (names, addresses, email, password, store, mirror,
   node id, model, networks) and the server.yaml that would be written,
   through the same loader the server uses; the store is connected to.
   Any problem: all of them are said and nothing is written;
2. folders, the zipapp, server.yaml (commented), the cluster CA, the server
   certificate, the admin token, agent.yaml and a node certificate when
   this machine is a node too, the administrator in the store, the llmgw
   user, the units, the firewall table;
3. start the services and wait until the client API answers (and /ready,
   when this machine serves the first model).

What exists is kept and said to be kept: an operator's server.yaml and a CA
are never written over. What init made is listed in installed.json for
`llmgw wipe`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from llmgw.hostnames import is_host, url_host
from llmgw.install import firewall
from llmgw.install.configs import SIM_MODEL, ServerFile, agent_yaml, server_yaml
from llmgw.install.layout import Layout
from llmgw.install.manifest import Manifest, make_dirs
from llmgw.install.service import install_service, service_running, start_service

__all__ = ["InitError", "InitOptions", "Installer", "check_options", "default_hosts", "primary_address"]

SERVICE_USER = "llmgw"
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+|[^@\s]+@localhost")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")

Say = Callable[[str], None]


class InitError(Exception):
    """init cannot go on; `problems` are sentences naming the field and what to do."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def primary_address() -> str:
    """The address this machine's default route leaves from (no packet is sent); 127.0.0.1 without one."""
    for family, target in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((target, 9))
                address = s.getsockname()[0]
                if not ipaddress.ip_address(address).is_loopback:
                    return address
        except OSError:
            continue
    return "127.0.0.1"


def default_hosts() -> list[str]:
    """This machine's name and its primary address: what nodes reach it by, unless told otherwise."""
    hosts = [socket.gethostname(), primary_address()]
    return [h for i, h in enumerate(hosts) if h and h not in hosts[:i]]


@attrs.frozen
class InitOptions:
    """Every field of the form, as `--yes` and one flag each give them."""

    hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)
    admin_email: str = ""
    admin_password: str | None = attrs.field(default=None, repr=False)
    store: str = attrs.field(default="", repr=False)  #: "" is the SQLite file in the layout
    mirror: str = "none"  #: none, here, or the mirror's file server URL
    node: bool = False
    node_id: str = ""
    engine_user: str | None = None  #: None: agent.yaml's default (llmgw-engine)
    model: str = "none"  #: none, sim, or a GGUF repository org/repo
    listen: str = ":8080"
    admin_listen: str = "127.0.0.1:9090"
    agent_listen: str = ":7443"
    metrics_listen: str = ":9091"
    mirror_listen: str = ":8081"
    mirror_api_listen: str = "127.0.0.1:8082"
    admin_from: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)
    nodes_from: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)
    metrics_from: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)
    firewall: bool = True
    start: bool = True
    wait: float = 180.0
    bundle: str = ""  #: an offline bundle (llmgw bundle create) imported into this machine's mirror
    bundle_sha256: str = ""  #: the sha256 its maker printed, checked when given
    trust: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)  #: release keys the bundle may be signed by


def _mask_dsn(dsn: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _is_postgres(dsn: str) -> bool:
    return dsn.lower().startswith(("postgres://", "postgresql://"))


def _check_host(host: str) -> str | None:
    text = host.strip().strip("[]")
    if not text:
        return "--host: empty; give each name or address nodes reach this machine by"
    if not is_host(text):
        return f"--host {host!r}: neither an IP address nor a DNS name; give one name or address per --host"
    return None


def _check_address(flag: str, value: str) -> tuple[str | None, int | None]:
    from llmgw.config.validate import split_address

    try:
        _, port = split_address(value)
    except ValueError as exc:
        return f"{flag} {value!r}: {exc}; write host:port, like :8080 or 127.0.0.1:9090", None
    return None, port


async def _check_postgres(dsn: str) -> str | None:
    import asyncpg

    try:
        conn = await asyncpg.connect(dsn, timeout=10)
    except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, ValueError) as exc:
        said = str(exc).replace(dsn, _mask_dsn(dsn)) or type(exc).__name__
        return (f"--store {_mask_dsn(dsn)}: cannot connect ({said}); check the address, the user's password "
                "and pg_hba.conf, or leave --store out for SQLite on this machine")
    try:
        await conn.execute("SELECT 1")
    finally:
        await conn.close()
    return None


def _check_sqlite(path: str) -> str | None:
    p = Path(path)
    if not p.is_absolute():
        return f"--store {path!r}: give the SQLite file's absolute path, or a postgres:// address"
    if p.is_dir():
        return f"--store {path}: a folder; give the path of the SQLite file to make in it"
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--store {path}: {parent} cannot be written here; give a path you can write"
    return None


async def check_options(layout: Layout, opts: InitOptions) -> list[str]:
    """Every problem with the fields, as sentences; empty when init may go ahead."""
    from llmgw.auth.passwords import WeakPassword, check_strength
    from llmgw.pki import InvalidName, validate_node_id

    problems: list[str] = []
    if not opts.hosts:
        problems.append("--host: give at least one name or address nodes reach this machine by")
    problems += [p for p in (_check_host(h) for h in opts.hosts) if p]
    if not _EMAIL.fullmatch(opts.admin_email or ""):
        problems.append(f"--admin {opts.admin_email!r}: give the administrator's email, like you@example.com")
    if opts.admin_password is not None:
        try:
            check_strength(opts.admin_password, email=opts.admin_email)
        except WeakPassword as exc:
            problems.append(f"--admin-password: {exc}; or leave it out to have one made and printed once")
    ports: dict[int, str] = {}
    addresses = [("--listen", opts.listen), ("--admin-listen", opts.admin_listen),
                 ("--agent-listen", opts.agent_listen), ("--metrics-listen", opts.metrics_listen)]
    if opts.mirror == "here":
        addresses += [("--mirror-listen", opts.mirror_listen), ("--mirror-api-listen", opts.mirror_api_listen)]
    for flag, value in addresses:
        problem, port = _check_address(flag, value)
        if problem:
            problems.append(problem)
        elif port is not None and port in ports:
            problems.append(f"{flag} {value!r}: port {port} is {ports[port]}'s too; give each its own port")
        elif port is not None:
            ports[port] = flag
    for flag, values in (("--admin-from", opts.admin_from), ("--nodes-from", opts.nodes_from),
                         ("--metrics-from", opts.metrics_from)):
        try:
            firewall.parse_networks(values, flag)
        except ValueError as exc:
            problems.append(str(exc))
    dsn = opts.store or str(layout.store)
    if _is_postgres(dsn):
        problem = await _check_postgres(dsn)
    elif "://" in dsn:
        problem = f"--store {_mask_dsn(dsn)!r}: give a SQLite file's path or a postgres:// address"
    else:
        problem = _check_sqlite(dsn)
    if problem:
        problems.append(problem)
    if opts.mirror not in ("none", "here"):
        parts = urllib.parse.urlsplit(opts.mirror)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"--mirror {opts.mirror!r}: give none, here, or the mirror's file server, "
                            "like http://models.internal:8081")
    if opts.node:
        try:
            validate_node_id(opts.node_id)
        except InvalidName as exc:
            problems.append(f"--node-id: {exc}")
    if opts.model not in ("none", "sim") and not _REPO.fullmatch(opts.model):
        problems.append(f"--model {opts.model!r}: give none, sim, or a GGUF repository like Qwen/Qwen3-0.6B-GGUF")
    if opts.model != "none" and not opts.node:
        problems.append(f"--model {opts.model}: a first model needs a node to run on; add --node "
                        "(this machine), or leave --model out and add models once nodes join")
    problems += _check_bundle(layout, opts)
    problems += _check_existing(layout)
    return problems


def _check_bundle(layout: Layout, opts: InitOptions) -> list[str]:
    """--bundle: checked whole (llmgw.bundle.importer) before anything is written; its problems, each named."""
    if opts.trust and not opts.bundle:
        from llmgw.release.keys import KeyError_, parse_public_key

        try:
            for key in opts.trust:
                parse_public_key(key, "--trust")
        except KeyError_ as exc:
            return [str(exc)]
    if not opts.bundle:
        return []
    if opts.mirror != "here":
        return [f"--bundle {opts.bundle}: needs --mirror here, the mirror on this machine its models, engines "
                "and release go into"]
    from llmgw.bundle.importer import BundleRefused, check_bundle
    from llmgw.release.keys import KeyError_
    from llmgw.release.trust import trust_from

    try:
        check_bundle(opts.bundle, trust_from(trusted=opts.trust), layout.state / "mirror",
                     expected_sha256=opts.bundle_sha256)
    except BundleRefused as exc:
        return [f"--bundle {p}" for p in [exc.where + ": refused"] + exc.problems]
    except (KeyError_, OSError) as exc:
        return [f"--bundle {opts.bundle}: {exc}"]
    return []


def _check_existing(layout: Layout) -> list[str]:
    """What is already there must be usable as it is: init keeps it."""
    from llmgw.config import ConfigError, load_server_config
    from llmgw.pki import PkiError, load_certificate

    problems: list[str] = []
    if layout.server_yaml.exists():
        try:
            load_server_config(layout.server_yaml)
        except ConfigError as exc:
            problems += [f"{p.located(str(layout.server_yaml))} (init keeps this file: fix it, or move it away "
                         "for init to write a new one)" for p in exc.details]
        except OSError as exc:
            problems.append(f"{layout.server_yaml}: cannot read it: {exc.strerror or exc}")
    ca = layout.ca_dir / "ca.pem"
    if ca.exists() or (layout.ca_dir / "ca-key.pem").exists():
        for p in (ca, layout.ca_dir / "ca-key.pem"):
            if not p.exists():
                problems.append(f"{p} is missing beside the other half of the CA; restore it, or move "
                                f"{layout.ca_dir} away for init to make a new CA (every certificate is then re-issued)")
        if ca.exists():
            try:
                load_certificate(ca)
            except PkiError as exc:
                problems.append(str(exc))
    return problems


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@attrs.define
class Installer:
    """One run of init against a layout: `check`, then `install` (or `preview` for --dry-run)."""

    layout: Layout
    opts: InitOptions
    say: Say
    manifest: Manifest = attrs.field(init=False)
    generated_password: str | None = attrs.field(init=False, default=None, repr=False)
    admin_from: tuple[str, ...] = attrs.field(init=False, default=())

    def __attrs_post_init__(self) -> None:
        self.manifest = Manifest.load(self.layout)
        self.admin_from = firewall.parse_networks(self.opts.admin_from, "--admin-from") if self._fields_ok() else ()

    def _fields_ok(self) -> bool:
        try:
            firewall.parse_networks(self.opts.admin_from, "--admin-from")
            return True
        except ValueError:
            return False

    # --- what gets written -------------------------------------------------

    @property
    def hostname(self) -> str:
        return socket.gethostname()

    @property
    def service_user(self) -> str | None:
        """The unit's User=: llmgw on the machine itself; with --root, whoever runs the services."""
        return SERVICE_USER

    def _admin_listen(self) -> str:
        if self.opts.admin_from:
            from llmgw.config.validate import is_loopback, split_address

            host, port = split_address(self.opts.admin_listen)
            if is_loopback(host):
                return f":{port}"
        return self.opts.admin_listen

    def server_file(self, *, inline_dsn: bool = False) -> ServerFile:
        """`inline_dsn`: the PostgreSQL address itself rather than file:, to check it before the file exists."""
        dsn = self.opts.store or str(self.layout.store)
        postgres = _is_postgres(dsn)
        mirror_url = mirror_api = ""
        if self.opts.mirror == "here":
            from llmgw.config.validate import split_address

            _, files_port = split_address(self.opts.mirror_listen)
            _, api_port = split_address(self.opts.mirror_api_listen)
            mirror_url = f"http://{url_host(self.opts.hosts[0])}:{files_port}"
            mirror_api = f"http://127.0.0.1:{api_port}"
        elif self.opts.mirror != "none":
            mirror_url = self.opts.mirror
        return ServerFile(
            listen=self.opts.listen, admin_listen=self._admin_listen(), admin_remote=bool(self.opts.admin_from),
            agent_listen=self.opts.agent_listen, metrics_listen=self.opts.metrics_listen,
            store_dsn=f"file:{self.layout.store_dsn_file}" if postgres and not inline_dsn else dsn,
            store_is_postgres=postgres, mirror_url=mirror_url, mirror_api=mirror_api, model=self.opts.model,
            mirror_offline=bool(self.opts.bundle), trusted_keys=self._trusted_keys(),
        )

    def server_text(self, *, inline_dsn: bool = False) -> str:
        return server_yaml(self.layout, self.server_file(inline_dsn=inline_dsn), hostname=self.hostname)

    def agent_text(self) -> str:
        from llmgw.config.validate import split_address

        _, port = split_address(self.opts.agent_listen)
        return agent_yaml(self.layout, node_id=self.opts.node_id, agent_address=f"https://127.0.0.1:{port}",
                          engine_user=self.opts.engine_user)

    def command(self) -> list[str]:
        from llmgw.buildinfo import zipapp_path, self_command

        if zipapp_path():
            return [_python(), str(self.layout.binary)]
        return self_command()

    def units(self) -> list[tuple[str, list[str], str | None]]:
        cmd = self.command()
        units: list[tuple[str, list[str], str | None]] = [
            ("server", [*cmd, "server", "--config", str(self.layout.server_yaml)], self.service_user)]
        if self.opts.node:
            units.append(("agent", [*cmd, "agent", "--config", str(self.layout.agent_yaml)], None))
        if self.opts.mirror == "here":
            f = self.server_file()
            units.append(("mirror", [*cmd, "mirror", "serve", "--dir", str(self.layout.state / "mirror"),
                                     "--base", f.mirror_url, "--listen", self.opts.mirror_listen,
                                     "--api-listen", self.opts.mirror_api_listen], self.service_user))
        return units

    def ruleset(self) -> str:
        config = self._config_in_effect()
        openings = firewall.control_plane_openings(
            listen=config.listen, admin_listen=config.admin_listen, agent_listen=config.agent_listen,
            metrics_listen=config.metrics_listen, admin_from=self.admin_from,
            nodes_from=firewall.parse_networks(self.opts.nodes_from, "--nodes-from"),
            metrics_from=firewall.parse_networks(self.opts.metrics_from, "--metrics-from"),
            mirror_listen=self.opts.mirror_listen if self.opts.mirror == "here" else "",
            mirror_api_listen=self.opts.mirror_api_listen if self.opts.mirror == "here" else "",
        )
        return firewall.ruleset(openings, title=f"the control plane on {self.hostname}")

    def _config_in_effect(self):
        """The server.yaml the server will read: the one there (kept), else the one init writes."""
        from llmgw.config import load_server_config, parse_server_config
        from llmgw.config.load import parse_yaml_text

        if self.layout.server_yaml.exists():
            return load_server_config(self.layout.server_yaml)
        return parse_server_config(parse_yaml_text(self.server_text(inline_dsn=True), str(self.layout.server_yaml)),
                                   str(self.layout.server_yaml), base_dir=self.layout.etc)

    # --- checking ------------------------------------------------------------

    async def check(self) -> None:
        """InitError with every problem; nothing is written."""
        from llmgw.config import ConfigError, parse_agent_config, parse_server_config
        from llmgw.config.load import parse_yaml_text

        problems = await check_options(self.layout, self.opts)
        if not problems and not self.layout.server_yaml.exists():
            try:
                parse_server_config(parse_yaml_text(self.server_text(inline_dsn=True), "server.yaml"), "server.yaml",
                                    base_dir=self.layout.etc)
            except ConfigError as exc:
                problems += [f"the server.yaml init would write is refused: {p.located('server.yaml')}"
                             for p in exc.details]
        if not problems and self.opts.node and not self.layout.agent_yaml.exists():
            try:
                parse_agent_config(parse_yaml_text(self.agent_text(), "agent.yaml"), "agent.yaml",
                                   base_dir=self.layout.etc)
            except ConfigError as exc:
                problems += [f"the agent.yaml init would write is refused: {p.located('agent.yaml')}"
                             for p in exc.details]
        if problems:
            raise InitError(problems)

    # --- --dry-run -----------------------------------------------------------

    def preview(self) -> str:
        """Every file and rule init would write, and what it would run; secrets are not shown."""
        L = self.layout
        out: list[str] = [f"llmgw server init --dry-run: nothing is written. Under {L.root}:", ""]

        def file(path: Path, text: str, mode: int) -> None:
            if path.exists():
                out.append(f"== {path}: exists, kept as it is")
                return
            out.extend([f"== {path} (mode {mode:04o})", text.rstrip("\n"), ""])

        for folder, mode in self._folders():
            out.append(f"folder {folder} (mode {mode:04o}){': exists' if folder.exists() else ''}")
        out.append("")
        if self.command()[1:2] == [str(L.binary)]:
            out += [f"== {L.binary}: a copy of this zipapp", ""]
        file(L.server_yaml, self.server_text(), 0o640)
        out.append(f"== {L.alert_rules}: exists, kept as it is" if L.alert_rules.exists() else
                   f"== {L.alert_rules} (mode 0644): the alert rules for Prometheus (llmgw ctl alerts export)")
        if _is_postgres(self.opts.store):
            file(L.store_dsn_file, f"{_mask_dsn(self.opts.store)}  (the password is written, not shown here)", 0o600)
        ca = L.ca_dir / "ca.pem"
        out.append(f"== {ca}: exists, kept" if ca.exists() else
                   f"== {L.ca_dir}/ca.pem, ca-key.pem (0600): a new cluster CA")
        hosts = ", ".join(self._cert_hosts())
        out.append(f"== {L.tls}/server.pem: exists, kept" if (L.tls / "server.pem").exists() else
                   f"== {L.tls}/server.pem, server-key.pem (0600), ca.pem: the server certificate for {hosts}")
        out.append(f"== {L.admin_token}: exists, kept" if L.admin_token.exists() else
                   f"== {L.admin_token} (0600): the admin token, 43 random characters")
        if self.opts.bundle:
            out.append(f"== {L.state / 'mirror'}: the bundle {self.opts.bundle} imported (checked: every file), "
                       "then marked offline")
        if self.opts.node:
            out.append("")
            file(L.agent_yaml, self.agent_text(), 0o640)
            out.append(f"== {L.tls}/node.pem, node-key.pem (0600): the node certificate for {self.opts.node_id}")
        out.append(f"\nthe administrator {self.opts.admin_email} (staff role admin) in the store "
                   f"{_mask_dsn(self.opts.store or str(L.store))}"
                   + ("" if self.opts.admin_password else ", with a password made and printed once"))
        if L.system and os.geteuid() == 0:
            out.append(f"the system user {SERVICE_USER} (useradd --system), owning {L.state} and {L.logs}")
        for role, argv, user in self.units():
            from llmgw.install.service import unit_text

            out += ["", f"== {L.unit(role)}", unit_text(L, role, argv, user=user).rstrip("\n")]
        out += ["", f"== {L.nft}", self.ruleset().rstrip("\n")]
        if self.opts.firewall:
            out.append("applied with nft -f" if firewall.firewall_applies(L) else
                       "not applied: " + self._firewall_skip_reason())
        if self.opts.start:
            out.append("")
            for role, _, _ in self.units():
                out.append(f"start llmgw {role}")
        return "\n".join(out) + "\n"

    def _firewall_skip_reason(self) -> str:
        return firewall.skip_reason(self.layout)

    # --- installing ------------------------------------------------------------

    def _folders(self) -> list[tuple[Path, int]]:
        L = self.layout
        return [(L.etc, 0o755), (L.ca_dir, 0o700), (L.tls, 0o755), (L.state, 0o750), (L.logs, 0o750)]

    def _cert_hosts(self) -> list[str]:
        hosts = [h.strip().strip("[]") for h in self.opts.hosts]
        # The agent and `llmgw doctor` on this machine dial the agent port on loopback.
        return [*hosts, *[h for h in ("127.0.0.1", "localhost") if h not in hosts]]

    def _write_new(self, path: Path, text: str, mode: int, what: str) -> None:
        if path.exists():
            self.say(f"{path}: kept as it is ({what}; init never writes over it)")
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(path, mode)
        self.manifest.add_file(path)
        self.say(f"{path}: wrote {what}")

    async def install(self) -> None:
        """Write and start everything; call `check` first."""
        from llmgw.admin.token import ensure_token
        from llmgw.pki import init_ca, issue_node, issue_server

        L = self.layout
        for folder, mode in self._folders():
            if folder.exists():
                self.say(f"{folder}: exists")
            else:
                make_dirs(self.manifest, folder, mode)
                self.say(f"{folder}: made (mode {mode:04o})")
        self.manifest.save()  # from here on, wipe knows what init made even if a later step fails
        self._install_binary()
        self._write_new(L.server_yaml, self.server_text(), 0o640, "the control plane's configuration")
        self._write_alert_rules()
        if _is_postgres(self.opts.store):
            self._write_new(L.store_dsn_file, self.opts.store + "\n", 0o600, "the PostgreSQL address (0600)")
        ca = L.ca_dir / "ca.pem"
        if ca.exists():
            self.say(f"{ca}: kept (the cluster CA; every certificate trusts it, so init never replaces it)")
        else:
            init_ca(L.ca_dir, name=f"llmgw cluster CA ({self.hostname})")
            self.say(f"{ca}: made the cluster CA (its key ca-key.pem, 0600, root only)")
        if (L.tls / "server.pem").exists():
            self.say(f"{L.tls / 'server.pem'}: kept (a new one for other names: llmgw ctl cert issue-server)")
        else:
            issue_server(L.ca_dir, self.hostname, self._cert_hosts(), L.tls)
            self.say(f"{L.tls / 'server.pem'}: issued for {', '.join(self._cert_hosts())}")
        if L.admin_token.exists():
            ensure_token(L.admin_token)
            self.say(f"{L.admin_token}: kept")
        else:
            ensure_token(L.admin_token)
            self.manifest.add_file(L.admin_token)
            self.say(f"{L.admin_token}: made the admin API's token (0600)")
        if self.opts.node:
            self._write_new(L.agent_yaml, self.agent_text(), 0o640, "this machine's agent configuration")
            if (L.tls / "node.pem").exists():
                self.say(f"{L.tls / 'node.pem'}: kept")
            else:
                issue_node(L.ca_dir, self.opts.node_id, L.tls)
                self.say(f"{L.tls / 'node.pem'}: issued for node {self.opts.node_id}")
        self._import_bundle()
        await self._ensure_admin()
        self._ensure_user()
        if not L.units.exists():
            make_dirs(self.manifest, L.units, 0o755, ours=False)
        for role, argv, user in self.units():
            self.say(install_service(L, role, argv, user=user))
            self.manifest.add_unit(role)
        self.manifest.save()
        self._install_firewall()
        self.manifest.save()

    def _trusted_keys(self) -> tuple[str, ...]:
        """--trust's keys as base64, for server.yaml's releases.trusted_keys (a key that cannot be read: none)."""
        from llmgw.release.keys import KeyError_, parse_public_key

        try:
            return tuple(parse_public_key(k, "--trust").base64 for k in self.opts.trust)
        except KeyError_:
            return ()  # check() has said why

    def _import_bundle(self) -> None:
        """--bundle: into this machine's mirror (checked again as it is written), which is then offline."""
        if not self.opts.bundle:
            return
        from llmgw.bundle.importer import BundleRefused, import_bundle
        from llmgw.release.trust import trust_from

        mirror = self.layout.state / "mirror"
        try:
            done = import_bundle(self.opts.bundle, mirror, trust_from(trusted=self.opts.trust),
                                 expected_sha256=self.opts.bundle_sha256)
        except BundleRefused as exc:
            raise InitError([f"--bundle {p}" for p in exc.problems]) from None
        self.say(f"{mirror}: imported the bundle {self.opts.bundle} (release {done.manifest.release}, "
                 f"{len(done.manifest.models)} models, signed by key {done.key_id}); the mirror is offline")

    def _write_alert_rules(self) -> None:
        from llmgw.obs.monitoring_files import rules_yaml

        self._write_new(self.layout.alert_rules, rules_yaml(), 0o644,
                        "the alert rules for Prometheus (rule_files; docs/monitoring.md)")

    def _install_binary(self) -> None:
        from llmgw.buildinfo import zipapp_path

        pyz = zipapp_path()
        if not pyz:
            self.say("running from a source checkout: the units run `"
                     + " ".join(self.command()) + "` (no zipapp is copied)")
            return
        target = self.layout.binary
        if target.exists() and os.path.samefile(pyz, target):
            self.say(f"{target}: this zipapp runs from there")
            return
        if target.exists() and _hash(target) == _hash(Path(pyz)):
            self.say(f"{target}: unchanged")
            return
        if not target.parent.exists():
            make_dirs(self.manifest, target.parent, 0o755)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(pyz, tmp)
        os.chmod(tmp, 0o755)
        replaced = target.exists()
        os.replace(tmp, target)
        self.manifest.add_file(target)
        self.say(f"{target}: {'replaced with' if replaced else 'copied'} this zipapp")

    async def _ensure_admin(self) -> None:
        from llmgw.auth.passwords import Passwords
        from llmgw.auth.tenancy import Tenancy
        from llmgw.store import open_store

        dsn = self.opts.store or str(self.layout.store)
        store = await open_store(dsn)
        try:
            existing = await store.get_user_by_email(self.opts.admin_email)
            if existing is not None:
                self.say(f"the administrator {self.opts.admin_email}: kept (already in the store; "
                         "its password is not changed)")
                return
            password = self.opts.admin_password
            if password is None:
                password = secrets.token_urlsafe(15)
                self.generated_password = password
            hasher = Passwords()
            try:
                password_hash = await hasher.hash(password)
            finally:
                hasher.close()
            tenancy = Tenancy(store, actor="llmgw server init")
            user = await tenancy.create_user(self.opts.admin_email, role="admin")
            await store.set_password_hash(user.id, password_hash)
            await store.append_audit("llmgw server init", "users.create", f"user:{user.id}",
                                     {"email": user.email, "via": "server init", "outcome": "ok"})
            self.say(f"the administrator {user.email}: made (staff role admin) in the store "
                     f"{_mask_dsn(dsn)}, schema version {store.schema_version}")
        finally:
            await store.close()

    def _ensure_user(self) -> None:
        """The llmgw system user on the machine itself, owning what the server writes."""
        L = self.layout
        if not (L.system and os.geteuid() == 0):
            self.say(f"the services run as {_me()} here (a user {SERVICE_USER} is made only for / as root)")
            return
        try:
            pwd.getpwnam(SERVICE_USER)
            self.say(f"user {SERVICE_USER}: exists")
        except KeyError:
            done = subprocess.run(
                ["useradd", "--system", "--user-group", "--home-dir", str(L.state), "--no-create-home",
                 "--shell", "/usr/sbin/nologin", "--comment", "llmgw services", SERVICE_USER],
                capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise InitError([f"useradd {SERVICE_USER} failed: {done.stderr.strip()}"])
            self.manifest.user = SERVICE_USER
            self.say(f"user {SERVICE_USER}: made (a system user without a login)")
        entry = pwd.getpwnam(SERVICE_USER)
        owned = [L.state, L.logs, L.server_yaml, L.admin_token, L.tls / "server.pem", L.tls / "server-key.pem"]
        if _is_postgres(self.opts.store):
            owned.append(L.store_dsn_file)
        for path in owned:
            if path.is_dir():
                for dirpath, _, names in os.walk(path):
                    os.chown(dirpath, entry.pw_uid, entry.pw_gid)
                    for name in names:
                        os.chown(os.path.join(dirpath, name), entry.pw_uid, entry.pw_gid)
            elif path.exists():
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _install_firewall(self) -> None:
        L = self.layout
        if not self.opts.firewall:
            self.say("firewall: left alone (--no-firewall)")
            return
        text = self.ruleset()
        old = L.nft.read_text(encoding="utf-8") if L.nft.exists() else None
        if old is not None and not old.startswith(firewall.HEADER):
            self.say(f"{L.nft}: kept (not written by llmgw); the table is not applied")
            return
        if old == text:
            self.say(f"{L.nft}: unchanged")
        else:
            if not L.nft.parent.exists():
                make_dirs(self.manifest, L.nft.parent, 0o755, ours=False)
            L.nft.write_text(text, encoding="utf-8")
            self.manifest.add_file(L.nft)
            self.say(f"{L.nft}: {'replaced' if old is not None else 'wrote'} the table inet llmgw")
        if firewall.firewall_applies(L):
            firewall.apply_ruleset(L.nft)
            self.manifest.firewall = True
            self.say("firewall: table inet llmgw applied (nft -f)")
        else:
            self.say("firewall: not applied: " + self._firewall_skip_reason())

    # --- starting ------------------------------------------------------------

    async def start(self) -> dict[str, str]:
        """Start every unit and wait for the client API (and /ready with a first model); the URLs."""
        for role, _, _ in self.units():
            self.say(start_service(self.layout, role))
        config = self._config_in_effect()
        from llmgw.config.validate import split_address

        _, client_port = split_address(config.listen)
        host, admin_port = split_address(config.admin_listen)
        base = f"http://127.0.0.1:{client_port}"
        await self._wait(f"{base}/health", "the client API to answer")
        if self.opts.node and config.models:
            await self._wait(f"{base}/ready", f"the first model ({config.models[0].name}) to answer")
        return {"client": f"http://{url_host(self.opts.hosts[0])}:{client_port}/v1",
                "admin": f"http://{'127.0.0.1' if not host or host in ('0.0.0.0', '::') else url_host(host)}:{admin_port}"}

    async def _wait(self, url: str, what: str) -> None:
        import aiohttp

        self.say(f"waiting for {what} ({url})")
        deadline = time.monotonic() + self.opts.wait
        last = "no answer yet"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            while True:
                try:
                    async with http.get(url) as resp:
                        if resp.status == 200:
                            return
                        last = f"{resp.status} {(await resp.text())[:200]}"
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    last = type(exc).__name__
                if not service_running(self.layout, "server"):
                    raise InitError([f"llmgw server stopped while init waited for {what}; "
                                     + self._where_logs("server")])
                if time.monotonic() > deadline:
                    raise InitError([f"{what}: not within {self.opts.wait:.0f} s (the last: {last}); "
                                     + self._where_logs("server")])
                await asyncio.sleep(0.5)

    def _where_logs(self, role: str) -> str:
        from llmgw.install.service import systemd_runs

        if systemd_runs(self.layout):
            return f"see `journalctl -u llmgw-{role}`"
        path = self.layout.log_file(role)
        try:
            tail = path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        return f"its log {path} ends:\n" + "\n".join(f"  {line}" for line in tail)



def _python() -> str:
    """The interpreter units run the zipapp with: the system's python3 where there is one."""
    return shutil.which("python3", path="/usr/bin:/bin") or os.path.realpath(sys.executable)


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


__all__ += ["SIM_MODEL"]
