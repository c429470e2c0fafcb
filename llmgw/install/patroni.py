"""`llmgw server init --patroni`: the files that make PostgreSQL a replicated store under Patroni, with etcd.

For each member it writes one folder, to be copied to that machine and installed there by its `install.sh`:

    <out>/<member>/install.sh              run as root on the member: puts the rest in place, starts the units
    <out>/<member>/patroni/patroni.yml     Patroni's configuration (no password in it)
    <out>/<member>/patroni/patroni.env     the superuser, replication and REST API passwords (0600)
    <out>/<member>/patroni/llmgw-password  the store user's password, read once by post-bootstrap.sh (0600)
    <out>/<member>/patroni/post-bootstrap.sh  creates the llmgw role (pg_monitor) and database on the first primary
    <out>/<member>/patroni/tls/            member.pem, member-key.pem (0600), ca.pem: from the cluster CA
    <out>/<member>/etcd/etcd.env           etcd's configuration, when the machine holds an etcd vote
    <out>/<member>/etcd/tls/               the same certificate, for etcd's own user
    <out>/<member>/llmgw-patroni.service, llmgw-etcd.service
    <out>/store-dsn                        llmgw's address of the store, every member in it (0600)

Everything speaks TLS with certificates of the cluster CA (llmgw/pki): PostgreSQL (hostssl only, replication
included), Patroni's REST API (client certificates required, and a password for what changes things) and etcd
(client and peer, client certificates required). Each member's one certificate serves and dials (both uses).

Nothing is written until every field is checked; an `--out` folder that already holds files is refused.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shlex
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import attrs
import yaml

from llmgw.hostnames import url_host
from llmgw.install.service import MARKER

__all__ = ["PatroniError", "Member", "EtcdMember", "PatroniPlan", "parse_members", "parse_etcd", "plan",
           "write_cluster", "Written", "find_bin_dir", "written_lines"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
PG_PORT, API_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT = 5432, 8008, 2379, 2380
SUPERUSER, REPLICATION_USER, RESTAPI_USER = "postgres", "replicator", "llmgw-patroni"
STORE_USER = STORE_DATABASE = "llmgw"


class PatroniError(Exception):
    """A field of `llmgw server init --patroni` is wrong, or a file cannot be written; the message says which."""

    @property
    def option(self) -> str:
        """The option the message starts with (--members), so a form can say it under its field; empty if none."""
        head = str(self).split(":", 1)[0]
        return head if head.startswith("--") and " " not in head else ""


@attrs.frozen
class Member:
    """A machine that runs PostgreSQL under Patroni."""

    name: str
    host: str
    pg_port: int = PG_PORT
    api_port: int = API_PORT


@attrs.frozen
class EtcdMember:
    """A machine that holds a vote in etcd (where Patroni keeps its leader lock)."""

    name: str
    host: str
    client_port: int = ETCD_CLIENT_PORT
    peer_port: int = ETCD_PEER_PORT


def _port(text: str, field: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise PatroniError(f"{field}: {spec!r} has the port {text!r}; a port is a number from 1 to 65535")
    return int(text)


def _split(spec: str, field: str, index: int, prefix: str, ports: int) -> tuple[str, str, list[int]]:
    """`[NAME=]HOST[:PORT[:PORT]]` → (name, host, ports given)."""
    name, eq, rest = spec.strip().rpartition("=")
    if not eq:
        name, rest = f"{prefix}{index}", spec.strip()
    if not _NAME.fullmatch(name):
        raise PatroniError(f"{field}: member name {name!r} is not allowed: use letters, digits, '.', '-' and '_', "
                           "starting with a letter or digit")
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        words = tail.lstrip(":").split(":") if tail else []
    else:
        host, *words = rest.split(":")
    if not host:
        raise PatroniError(f"{field}: {spec!r} names no host; give NAME=HOST or HOST, e.g. db1=10.0.0.149")
    if len(words) > ports:
        raise PatroniError(f"{field}: {spec!r} has more than {ports} port(s) after the host")
    return name, host, [_port(w, field, spec) for w in words]


def parse_members(text: str) -> list[Member]:
    """`--members`: comma-separated `[NAME=]HOST[:PG_PORT[:API_PORT]]`, two or more, names and addresses unique."""
    specs = [s for s in (text or "").split(",") if s.strip()]
    if len(specs) < 2:
        raise PatroniError("--members: give two or more PostgreSQL members, comma-separated, e.g. "
                           "db1=10.0.0.149,db2=10.0.0.150 (three for a standby to spare)")
    members = []
    for i, spec in enumerate(specs, 1):
        name, host, ports = _split(spec, "--members", i, "pg", 2)
        members.append(Member(name, host, *ports))
    _unique(members, "--members", [(m.host, m.pg_port) for m in members] + [(m.host, m.api_port) for m in members])
    return members


def parse_etcd(text: str | None, members: Sequence[Member]) -> list[EtcdMember]:
    """`--etcd`: comma-separated `[NAME=]HOST[:CLIENT_PORT[:PEER_PORT]]`; absent, one etcd on each member."""
    if not text:
        return [EtcdMember(m.name, m.host) for m in members]
    etcd = []
    for i, spec in enumerate(s for s in text.split(",") if s.strip()):
        name, host, ports = _split(spec, "--etcd", i + 1, "etcd", 2)
        etcd.append(EtcdMember(name, host, *ports))
    if not etcd:
        raise PatroniError("--etcd: give one or more etcd members, or leave it out for one on each member")
    _unique(etcd, "--etcd", [(e.host, e.client_port) for e in etcd] + [(e.host, e.peer_port) for e in etcd])
    return etcd


def _unique(items: Sequence, field: str, addresses: list[tuple[str, int]]) -> None:
    names = [i.name for i in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PatroniError(f"{field}: the name {twice[0]!r} is given twice; every member needs its own")
    taken = sorted({a for a in addresses if addresses.count(a) > 1})
    if taken:
        raise PatroniError(f"{field}: {taken[0][0]}:{taken[0][1]} is used twice; members sharing a machine need "
                           "ports of their own (HOST:PG_PORT:API_PORT)")


def find_bin_dir() -> str | None:
    """The newest /usr/lib/postgresql/<version>/bin with initdb and pg_ctl (Debian's layout)."""
    found = []
    for folder in Path("/usr/lib/postgresql").glob("*/bin"):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists() and folder.parent.name.isdigit():
            found.append((int(folder.parent.name), str(folder)))
    return max(found)[1] if found else None


@attrs.frozen
class PatroniPlan:
    """Everything checked, nothing written yet. Paths may hold `{member}`: each member's own (a trial on one
    machine); on separate machines the defaults are the same on each."""

    members: list[Member]
    etcd: list[EtcdMember]
    out: Path
    ca_dir: Path
    client_ca: str  #: where the control planes find the CA's certificate, for the DSN's sslrootcert
    bin_dir: str
    config_dir: str = "/etc/llmgw/patroni"
    etcd_config_dir: str = "/etc/llmgw/etcd"
    data_dir: str = ""  #: default /var/lib/postgresql/<version>/llmgw
    etcd_data_dir: str = "/var/lib/etcd/llmgw"
    socket_dir: str = "/var/run/postgresql"
    clients: tuple[str, ...] = ()  #: CIDRs the control planes connect from; default every member and etcd host
    scope: str = "llmgw"
    ttl: int = 30
    loop_wait: int = 10
    retry_timeout: int = 10
    patroni_bin: str = "/usr/bin/patroni"
    etcd_bin: str = "/usr/bin/etcd"

    def path(self, template: str, name: str) -> str:
        return template.replace("{member}", name)


def _cidr(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text.strip(), strict=False))
    except ValueError:
        raise PatroniError(f"--clients: {text!r} is not an address or CIDR (e.g. 10.0.0.0/24)") from None


def _host_cidr(host: str) -> str | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a DNS name: pg_hba takes it as it is
    return f"{address}/{32 if address.version == 4 else 128}"


def plan(*, members: str, etcd: str | None, out: str | os.PathLike[str], ca_dir: str | os.PathLike[str],
         client_ca: str, bin_dir: str | None = None, clients: Sequence[str] = (), **options) -> PatroniPlan:
    """Check every field; the plan `write_cluster` writes. Raises PatroniError naming the field."""
    parsed = parse_members(members)
    voters = parse_etcd(etcd, parsed)
    if len(voters) % 2 == 0:
        raise PatroniError(f"--etcd: {len(voters)} etcd members cannot outvote a split into halves; give an odd "
                           "number (three: two database machines and any third, e.g. a control plane)")
    ca = Path(ca_dir)
    if not (ca / "ca.pem").exists() or not (ca / "ca-key.pem").exists():
        raise PatroniError(f"--ca: {ca} holds no cluster CA (ca.pem and ca-key.pem); run this on the control plane "
                           "that `llmgw server init` set up, or give --ca DIR of that CA")
    bins = bin_dir or find_bin_dir()
    if not bins or not Path(bins, "initdb").exists():
        raise PatroniError(f"--pg-bin: {bins or 'no /usr/lib/postgresql/*/bin'} has no initdb; apt-get install "
                           "postgresql, or give --pg-bin DIR of the PostgreSQL the members run")
    out_dir = Path(out)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise PatroniError(f"--out: {out_dir} already holds files (a cluster's passwords and keys, maybe one that "
                           "runs); choose another folder, or remove it if it is a mistake")
    for key in ("ttl", "loop_wait", "retry_timeout"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise PatroniError(f"--{key.replace('_', '-')}: {value!r} must be a whole number of seconds, 1 or more")
    ttl = options.get("ttl") or 30
    loop_wait = options.get("loop_wait") or min(10, max(1, ttl // 3))
    retry = options.get("retry_timeout") or min(10, max(1, ttl // 3))
    if loop_wait + 2 * retry > ttl:
        raise PatroniError(f"--ttl: {ttl} s must be at least --loop-wait + 2 × --retry-timeout "
                           f"({loop_wait} + 2 × {retry}), or Patroni may lose its lock while healthy")
    version = Path(bins).parent.name
    options = {k: v for k, v in options.items() if v is not None}
    options.update(ttl=ttl, loop_wait=loop_wait, retry_timeout=retry)
    options.setdefault("data_dir", f"/var/lib/postgresql/{version}/llmgw")
    wanted = tuple(_cidr(c) for c in clients)
    return PatroniPlan(members=parsed, etcd=voters, out=out_dir, ca_dir=ca, client_ca=client_ca, bin_dir=bins,
                       clients=wanted, **options)


@attrs.frozen
class Written:
    dsn: str  #: with the password: goes into store-dsn only
    dsn_shown: str
    files: list[Path]


def _password() -> str:
    return secrets.token_urlsafe(24)


def store_dsn(p: PatroniPlan, password: str) -> str:
    hosts = ",".join(f"{url_host(m.host)}:{m.pg_port}" for m in p.members)
    query = urllib.parse.urlencode({"target_session_attrs": "read-write", "sslmode": "verify-full",
                                    "sslrootcert": p.client_ca}, safe="/")
    return f"postgresql://{STORE_USER}:{password}@{hosts}/{STORE_DATABASE}?{query}"



def _hba(p: PatroniPlan) -> list[str]:
    lines = ["local all postgres peer", "local all all scram-sha-256"]
    peers = sorted({_host_cidr(m.host) or m.host for m in p.members})
    for peer in peers:
        lines.append(f"hostssl replication {REPLICATION_USER} {peer} scram-sha-256")
        lines.append(f"hostssl all {SUPERUSER} {peer} scram-sha-256")  # pg_rewind, and Patroni's own checks
    clients = p.clients or tuple(sorted({_host_cidr(h) or h for h in [m.host for m in p.members]
                                         + [e.host for e in p.etcd]}))
    for client in clients:
        lines.append(f"hostssl {STORE_DATABASE} {STORE_USER} {client} scram-sha-256")
    return lines


def patroni_config(p: PatroniPlan, m: Member) -> dict:
    conf = p.path(p.config_dir, m.name)
    tls = f"{conf}/tls"
    listen = f"{m.host}:{m.pg_port}" if m.host in ("127.0.0.1", "localhost") else f"127.0.0.1,{m.host}:{m.pg_port}"
    ssl_client = {"sslmode": "verify-ca", "sslrootcert": f"{tls}/ca.pem"}
    return {
        "scope": p.scope,
        "namespace": "/llmgw/",
        "name": m.name,
        "restapi": {
            "listen": f"{url_host(m.host)}:{m.api_port}",
            "connect_address": f"{url_host(m.host)}:{m.api_port}",
            "certfile": f"{tls}/member.pem",
            "keyfile": f"{tls}/member-key.pem",
            "cafile": f"{tls}/ca.pem",
            "verify_client": "required",
            # restapi.authentication comes from patroni.env (PATRONI_RESTAPI_USERNAME/PASSWORD)
        },
        "ctl": {"certfile": f"{tls}/member.pem", "keyfile": f"{tls}/member-key.pem", "cacert": f"{tls}/ca.pem"},
        "etcd3": {
            "hosts": [f"{url_host(e.host)}:{e.client_port}" for e in p.etcd],
            "protocol": "https",
            "cacert": f"{tls}/ca.pem",
            "cert": f"{tls}/member.pem",
            "key": f"{tls}/member-key.pem",
        },
        "bootstrap": {
            "dcs": {
                "ttl": p.ttl,
                "loop_wait": p.loop_wait,
                "retry_timeout": p.retry_timeout,
                "maximum_lag_on_failover": 1048576,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "wal_keep_size": "1GB",
                        "wal_log_hints": "on",
                        "password_encryption": "scram-sha-256",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, "data-checksums"],
            "post_bootstrap": f"{conf}/post-bootstrap.sh",
        },
        "postgresql": {
            "listen": listen,
            "connect_address": f"{url_host(m.host)}:{m.pg_port}",
            "data_dir": p.path(p.data_dir, m.name),
            "bin_dir": p.bin_dir,
            "pgpass": f"{conf}/pgpass",
            "use_unix_socket": True,
            "basebackup": {"checkpoint": "fast"},  # a new standby clones now, not at the next checkpoint
            "authentication": {
                # passwords from patroni.env (PATRONI_SUPERUSER_PASSWORD, PATRONI_REPLICATION_PASSWORD)
                "superuser": {"username": SUPERUSER, **ssl_client},
                "replication": {"username": REPLICATION_USER, **ssl_client},
            },
            "parameters": {
                "unix_socket_directories": p.path(p.socket_dir, m.name),
                "ssl": "on",
                "ssl_cert_file": f"{tls}/member.pem",
                "ssl_key_file": f"{tls}/member-key.pem",
                "ssl_ca_file": f"{tls}/ca.pem",
            },
            "pg_hba": _hba(p),
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


def etcd_env(p: PatroniPlan, e: EtcdMember, token: str) -> str:
    tls = f"{p.path(p.etcd_config_dir, e.name)}/tls"
    cluster = ",".join(f"{x.name}=https://{url_host(x.host)}:{x.peer_port}" for x in p.etcd)
    host = url_host(e.host)
    values = {
        "ETCD_NAME": e.name,
        "ETCD_DATA_DIR": p.path(p.etcd_data_dir, e.name),
        "ETCD_LISTEN_PEER_URLS": f"https://{host}:{e.peer_port}",
        "ETCD_LISTEN_CLIENT_URLS": f"https://{host}:{e.client_port}",
        "ETCD_INITIAL_ADVERTISE_PEER_URLS": f"https://{host}:{e.peer_port}",
        "ETCD_ADVERTISE_CLIENT_URLS": f"https://{host}:{e.client_port}",
        "ETCD_INITIAL_CLUSTER": cluster,
        "ETCD_INITIAL_CLUSTER_STATE": "new",
        "ETCD_INITIAL_CLUSTER_TOKEN": token,
        "ETCD_CERT_FILE": f"{tls}/member.pem",
        "ETCD_KEY_FILE": f"{tls}/member-key.pem",
        "ETCD_TRUSTED_CA_FILE": f"{tls}/ca.pem",
        "ETCD_CLIENT_CERT_AUTH": "true",
        "ETCD_PEER_CERT_FILE": f"{tls}/member.pem",
        "ETCD_PEER_KEY_FILE": f"{tls}/member-key.pem",
        "ETCD_PEER_TRUSTED_CA_FILE": f"{tls}/ca.pem",
        "ETCD_PEER_CLIENT_CERT_AUTH": "true",
        "ETCD_ENABLE_V2": "false",
    }
    head = f"# llmgw: etcd member {e.name} of {len(p.etcd)}, holding Patroni's leader lock for the store.\n"
    return head + "".join(f"{k}={v}\n" for k, v in values.items())


POST_BOOTSTRAP = """#!/bin/sh
# {marker}
# Run once by Patroni on the first primary, with the superuser's connection as $1:
# the store's role (pg_monitor, so llmgw can show each standby's state and lag) and its database.
set -eu
password=$(cat {conf}/llmgw-password)
{psql} "$1" -v ON_ERROR_STOP=1 -v password="$password" <<'SQL'
CREATE ROLE {user} LOGIN PASSWORD :'password';
GRANT pg_monitor TO {user};
CREATE DATABASE {database} OWNER {user};
SQL
"""


def _unit(description: str, user: str, env_file: str, argv: list[str], after: str = "") -> str:
    lines = [
        MARKER.replace("`llmgw wipe` removes it", "its install.sh installed it"),
        "[Unit]",
        f"Description={description}",
        "Wants=network-online.target",
        f"After=network-online.target{' ' + after if after else ''}",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"Group={user}",
        f"EnvironmentFile={env_file}",
        f"ExecStart={' '.join(shlex.quote(a) for a in argv)}",
        "ExecReload=/bin/kill -s HUP $MAINPID",
        "KillMode=process",  # Patroni stops its PostgreSQL itself; etcd is one process
        "TimeoutSec=30",
        "Restart=on-failure",
        "RestartSec=5s",
        "LimitNOFILE=65536",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def install_script(p: PatroniPlan, name: str, member: Member | None, voter: EtcdMember | None) -> str:
    conf = p.path(p.config_dir, name)
    etcd_conf = p.path(p.etcd_config_dir, name)
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# {MARKER}",
        f"# Run as root on {name} ({(member or voter).host}), from this folder: sh install.sh",
        "set -eu",
        'here=$(cd "$(dirname "$0")" && pwd)',
        '[ "$(id -u)" = 0 ] || { echo "install.sh: run it as root (sudo sh install.sh)" >&2; exit 1; }',
        "# Debian's own units would run a second etcd on 2379 and a second Patroni: masked.",
        "systemctl disable --now etcd.service patroni.service 2>/dev/null || true",
        "systemctl mask etcd.service patroni.service",
    ]
    units = []
    if voter is not None:
        lines += [
            "command -v etcd >/dev/null || { echo 'install.sh: etcd is missing: apt-get install etcd-server' >&2; exit 1; }",
            f"install -d -m 0700 -o etcd -g etcd {q(etcd_conf)} {q(p.path(p.etcd_data_dir, name))}",
            f'cp -R "$here/etcd/." {q(etcd_conf)}/',
            f"chown -R etcd:etcd {q(etcd_conf)}",
            f"chmod 0600 {q(etcd_conf)}/etcd.env {q(etcd_conf)}/tls/member-key.pem",
            'cp "$here/llmgw-etcd.service" /etc/systemd/system/',
        ]
        units.append("llmgw-etcd.service")
    if member is not None:
        lines += [
            "command -v patroni >/dev/null || { echo 'install.sh: patroni is missing: apt-get install patroni' >&2; exit 1; }",
            f"[ -x {q(p.bin_dir)}/initdb ] || {{ echo 'install.sh: no PostgreSQL in {p.bin_dir}: apt-get install "
            "postgresql' >&2; exit 1; }",
            "# Debian's default cluster would hold the port and start beside Patroni's.",
            "if command -v pg_lsclusters >/dev/null && pg_lsclusters -h | grep -q ' main '; then",
            "  echo 'install.sh: a Debian PostgreSQL cluster \"main\" exists; if it holds nothing: "
            "pg_dropcluster --stop VERSION main, then run this again' >&2; exit 1",
            "fi",
            f"install -d -m 0700 -o postgres -g postgres {q(conf)}",
            f"install -d -m 0700 -o postgres -g postgres {q(str(Path(p.path(p.data_dir, name)).parent))}",
            f"install -d -m 2775 -o postgres -g postgres {q(p.path(p.socket_dir, name))}",
            f'cp -R "$here/patroni/." {q(conf)}/',
            f"chown -R postgres:postgres {q(conf)}",
            f"chmod 0600 {q(conf)}/patroni.env {q(conf)}/llmgw-password {q(conf)}/tls/member-key.pem",
            f"chmod 0700 {q(conf)}/post-bootstrap.sh",
            'cp "$here/llmgw-patroni.service" /etc/systemd/system/',
        ]
        units.append("llmgw-patroni.service")
    lines += ["systemctl daemon-reload", f"systemctl enable --now {' '.join(units)}",
              f"echo 'install.sh: {' and '.join(units)} started on {name}'"]
    if member is not None:
        lines.append(f"echo 'patronictl -c {conf}/patroni.yml list   shows the cluster (as postgres, with "
                     f"its patroni.env)'")
    return "\n".join(lines) + "\n"


def write_cluster(p: PatroniPlan) -> Written:
    """Write every member's folder and the store's address; returns the address and the files written."""
    from llmgw.pki import PkiError, issue_peer

    files: list[Path] = []
    passwords = {k: _password() for k in ("superuser", "replication", "restapi", "store")}
    token = f"llmgw-{secrets.token_hex(6)}"
    p.out.mkdir(parents=True, exist_ok=True)
    os.chmod(p.out, 0o700)
    by_name: dict[str, tuple[Member | None, EtcdMember | None]] = {}
    for m in p.members:
        by_name[m.name] = (m, None)
    for e in p.etcd:
        member = by_name.get(e.name, (None, None))[0]
        by_name[e.name] = (member, e)

    def write(path: Path, text: str, mode: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        files.append(path)

    for name, (member, voter) in by_name.items():
        folder = p.out / name
        hosts = sorted({h for h in [member.host if member else None, voter.host if voter else None] if h})
        try:
            for sub in (["patroni"] if member else []) + (["etcd"] if voter else []):
                issued = issue_peer(p.ca_dir, name, [*hosts, name], folder / sub / "tls")
                files += [issued.cert, issued.key, issued.ca]
        except PkiError as exc:
            raise PatroniError(f"the certificate of {name}: {exc}") from exc
        if member is not None:
            conf = p.path(p.config_dir, name)
            text = yaml.safe_dump(patroni_config(p, member), sort_keys=False, default_flow_style=False)
            write(folder / "patroni" / "patroni.yml",
                  f"# {MARKER}\n# Patroni on {name}; the passwords are in patroni.env beside it.\n{text}", 0o644)
            write(folder / "patroni" / "patroni.env",
                  f"PATRONI_SUPERUSER_USERNAME={SUPERUSER}\nPATRONI_SUPERUSER_PASSWORD={passwords['superuser']}\n"
                  f"PATRONI_REPLICATION_USERNAME={REPLICATION_USER}\n"
                  f"PATRONI_REPLICATION_PASSWORD={passwords['replication']}\n"
                  f"PATRONI_RESTAPI_USERNAME={RESTAPI_USER}\nPATRONI_RESTAPI_PASSWORD={passwords['restapi']}\n",
                  0o600)
            write(folder / "patroni" / "llmgw-password", passwords["store"] + "\n", 0o600)
            write(folder / "patroni" / "post-bootstrap.sh",
                  POST_BOOTSTRAP.format(marker=MARKER, conf=shlex.quote(conf), psql=shlex.quote(f"{p.bin_dir}/psql"),
                                        user=STORE_USER, database=STORE_DATABASE), 0o700)
            write(folder / "llmgw-patroni.service",
                  _unit(f"llmgw store: PostgreSQL under Patroni ({name})", "postgres", f"{conf}/patroni.env",
                        [p.patroni_bin, f"{conf}/patroni.yml"], "llmgw-etcd.service" if voter else ""), 0o644)
        if voter is not None:
            etcd_conf = p.path(p.etcd_config_dir, name)
            write(folder / "etcd" / "etcd.env", etcd_env(p, voter, token), 0o600)
            write(folder / "llmgw-etcd.service",
                  _unit(f"llmgw store: etcd member {name} (Patroni's leader lock)", "etcd", f"{etcd_conf}/etcd.env",
                        [p.etcd_bin]), 0o644)
        write(folder / "install.sh", install_script(p, name, member, voter), 0o700)
    dsn = store_dsn(p, passwords["store"])
    write(p.out / "store-dsn", dsn + "\n", 0o600)
    from llmgw.store.postgres import redact

    return Written(dsn=dsn, dsn_shown=redact(dsn), files=files)


def written_lines(p: PatroniPlan, written: Written) -> list[str]:
    """What to do with what `write_cluster` wrote, per machine, and the store's address with its password hidden:
    what `server init --patroni` prints and the console's Do → Replicate the store shows."""
    names = sorted({m.name for m in p.members} | {e.name for e in p.etcd})
    lines = [f"Wrote {p.out}/ for a store of {len(p.members)} PostgreSQL members under Patroni and "
             f"{len(p.etcd)} etcd members, all on TLS from the CA in {p.ca_dir}:"]
    for name in names:
        m = next((m for m in p.members if m.name == name), None)
        e = next((e for e in p.etcd if e.name == name), None)
        what = " and ".join(x for x in ("Patroni + PostgreSQL" if m else "", "etcd" if e else "") if x)
        lines.append(f"  {p.out / name}/  for {(m or e).host}: {what}; copy it there and run `sudo sh install.sh` "
                     "in it")
    lines.append(f"  {p.out / 'store-dsn'}  the store's address, every member in it (0600):")
    lines.append(f"    {written.dsn_shown}")
    lines.append("Then on each control plane: `llmgw server init --store \"$(cat store-dsn)\"` (a new one), or put "
                 "the address in its store-dsn file (an installed one) and restart llmgw-server.")
    return lines
