"""`llmgw server init --patroni`: write what makes the store PostgreSQL under Patroni on several machines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PATRONI_HELP = (
    "write, instead of setting up a control plane, the files that make the store PostgreSQL under Patroni with "
    "etcd on --members (a folder per machine with its install.sh, and the store's address in OUT/store-dsn); "
    "docs/store.md says what to run where"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a replicated store (--patroni)")
    g.add_argument("--patroni", action="store_true", help=PATRONI_HELP)
    g.add_argument("--members", metavar="[NAME=]HOST[:PG_PORT[:API_PORT]],...",
                   help="the PostgreSQL machines, two or more (ports default 5432 and 8008 for Patroni's API)")
    g.add_argument("--etcd", metavar="[NAME=]HOST[:CLIENT_PORT[:PEER_PORT]],...",
                   help="the etcd members, an odd number (default: one on each of --members; ports 2379 and 2380)")
    g.add_argument("--out", metavar="DIR", default="llmgw-patroni",
                   help="where the folders are written (default ./llmgw-patroni; it must be empty)")
    g.add_argument("--ca", metavar="DIR", help="the cluster CA that signs the members' certificates "
                   "(default this control plane's, ROOT/etc/llmgw/ca)")
    g.add_argument("--client-ca", metavar="PATH", help="where control planes find the CA certificate, for the "
                   "address's sslrootcert (default /etc/llmgw/tls/ca.pem)")
    g.add_argument("--clients", metavar="CIDR", action="append", default=[],
                   help="addresses the control planes connect from (repeatable; default every member and etcd host)")
    g.add_argument("--pg-bin", metavar="DIR", help="the members' PostgreSQL binaries (default the newest "
                   "/usr/lib/postgresql/*/bin here)")
    g.add_argument("--config-dir", metavar="DIR", help="Patroni's folder on each member (default "
                   "/etc/llmgw/patroni; {member} is replaced by the member's name)")
    g.add_argument("--etcd-config-dir", metavar="DIR", help="etcd's folder (default /etc/llmgw/etcd; {member} too)")
    g.add_argument("--data-dir", metavar="DIR", help="PostgreSQL's data (default /var/lib/postgresql/VERSION/llmgw)")
    g.add_argument("--etcd-data-dir", metavar="DIR", help="etcd's data (default /var/lib/etcd/llmgw)")
    g.add_argument("--socket-dir", metavar="DIR", help="PostgreSQL's socket folder (default /var/run/postgresql)")
    g.add_argument("--ttl", type=int, metavar="SECONDS",
                   help="how long the leader lock lives without renewal: a lost primary is replaced after about "
                        "this long (default 30)")
    g.add_argument("--loop-wait", type=int, metavar="SECONDS", help="Patroni's loop (default 10)")
    g.add_argument("--retry-timeout", type=int, metavar="SECONDS",
                   help="how long Patroni retries etcd and PostgreSQL (default 10)")


def run(args: argparse.Namespace) -> int:
    from llmgw.install.layout import Layout
    from llmgw.install.patroni import PatroniError, plan, write_cluster, written_lines

    layout = Layout(Path(args.root))
    if not args.members:
        print("llmgw server init --patroni: give --members, e.g. --members db1=10.0.0.149,db2=10.0.0.150 "
              "--etcd db1=10.0.0.149,db2=10.0.0.150,ctl=10.0.0.140", file=sys.stderr)
        return 2
    paths = {k: getattr(args, k) for k in ("config_dir", "etcd_config_dir", "data_dir", "etcd_data_dir",
                                             "socket_dir", "ttl", "loop_wait", "retry_timeout")}
    try:
        p = plan(members=args.members, etcd=args.etcd, out=args.out, ca_dir=args.ca or layout.ca_dir,
                 client_ca=args.client_ca or str(Layout(Path("/")).tls / "ca.pem"), bin_dir=args.pg_bin,
                 clients=args.clients, **paths)
        if args.dry_run:
            print(f"llmgw server init --patroni: every field is right; nothing written (--dry-run). It would write "
                  f"{p.out}/ with a folder for each of {', '.join(sorted({m.name for m in p.members} | {e.name for e in p.etcd}))}")
            return 0
        written = write_cluster(p)
    except PatroniError as exc:
        print(f"llmgw server init --patroni: {exc}; nothing was written", file=sys.stderr)
        return 2
    for line in written_lines(p, written):
        print(line)
    return 0
