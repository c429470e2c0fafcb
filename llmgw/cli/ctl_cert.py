"""`llmgw ctl cert`: the cluster's own CA and the certificates of the agent port.

Works on files only, not on a running control plane: the CA's key is meant
to stay on the machine nodes are added from.
"""

from __future__ import annotations

import argparse
import sys

from llmgw import pki
from llmgw.cli.common import add_json_flag, print_json

HELP = "Make the cluster's CA and issue server, node and client certificates (files; no server needed)."


def register(sub) -> None:
    parser = sub.add_parser("cert", help=HELP, description=HELP)
    cmds = parser.add_subparsers(dest="cert_command", metavar="COMMAND")
    parser.set_defaults(handler=_usage(parser))

    p = cmds.add_parser(
        "init-ca", help="Make a new CA: ca.pem and ca-key.pem in --dir.",
        description="Make a new CA: ca.pem and ca-key.pem (0600) in --dir. Keep ca-key.pem "
        "where you add nodes from: whoever holds it can make any node's identity.",
    )
    p.add_argument("--dir", required=True, help="where the CA's files go")
    p.add_argument("--name", default=pki.DEFAULT_CA_NAME, help="the CA's common name (default: %(default)s)")
    p.add_argument("--days", type=int, default=pki.CA_DAYS, help="validity in days (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing CA; every certificate it issued stops being trusted")
    add_json_flag(p)
    p.set_defaults(handler=run_init_ca)

    p = cmds.add_parser(
        "issue-server", help="Issue a server certificate (the agent port, the mirror's API).",
        description="Issue server.pem and server-key.pem into --out, with ca.pem beside them. Give "
        "every address and DNS name clients dial as a --host.",
    )
    p.add_argument("name", metavar="NAME", help="the certificate's common name, e.g. llmgw-ctl")
    p.add_argument("--host", action="append", required=True, metavar="HOST",
                   help="an IP address or DNS name clients dial (repeat for each)")
    _add_dirs(p)
    p.set_defaults(handler=run_issue_server)

    p = cmds.add_parser(
        "issue-node", help="Issue a node's client certificate; its common name is the node id.",
        description="Issue node.pem and node-key.pem into --out, with ca.pem beside them. The node "
        "registers under NODE_ID and no other.",
    )
    p.add_argument("node_id", metavar="NODE_ID", help="letters, digits, '.', '-', '_'; at most 63")
    _add_dirs(p)
    p.set_defaults(handler=run_issue_node)

    p = cmds.add_parser(
        "issue-client", help="Issue a client certificate for anything else that dials with one.",
        description="Issue client.pem and client-key.pem into --out, with ca.pem beside them.",
    )
    p.add_argument("name", metavar="NAME", help="the certificate's common name")
    _add_dirs(p)
    p.set_defaults(handler=run_issue_client)

    p = cmds.add_parser(
        "show", help="Print a certificate: subject, names, usage, expiry, fingerprint.",
        description="Print what a certificate file says: subject, names, usage, expiry, fingerprint.",
    )
    p.add_argument("file", metavar="FILE", help="a PEM or DER certificate")
    add_json_flag(p)
    p.set_defaults(handler=run_show)


def _add_dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", required=True, help="the CA's directory (ca.pem, ca-key.pem)")
    p.add_argument("--out", required=True, help="where the certificate, its key and ca.pem go")
    p.add_argument("--days", type=int, default=pki.LEAF_DAYS, help="validity in days (default: %(default)s)")
    add_json_flag(p)


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw ctl cert: name a command: init-ca, issue-server, issue-node, issue-client, show", file=sys.stderr)
        return 2

    return handler


def _fail(exc: pki.PkiError) -> int:
    print(f"llmgw ctl cert: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, pki.InvalidName) else 1


def _report(args: argparse.Namespace, what: str, files: pki.IssuedFiles) -> int:
    info = pki.describe(pki.load_certificate(files.cert))
    if args.json:
        print_json({"cert": str(files.cert), "key": str(files.key), "ca": str(files.ca), **info})
        return 0
    print(f"{what}: {files.cert}")
    print(f"key:  {files.key} (0600)")
    if files.ca != files.cert:
        print(f"ca:   {files.ca}")
    print(f"expires {info['not_after']} (in {info['days_left']} days); sha256 {info['sha256']}")
    return 0


def run_init_ca(args: argparse.Namespace) -> int:
    try:
        files = pki.init_ca(args.dir, args.name, force=args.force, days=args.days)
    except pki.PkiError as exc:
        return _fail(exc)
    code = _report(args, "CA certificate", files)
    if not args.json:
        print(f"keep {files.key} secret: whoever holds it can make any node's identity")
    return code


def run_issue_server(args: argparse.Namespace) -> int:
    try:
        files = pki.issue_server(args.dir, args.name, args.host, args.out, days=args.days)
    except pki.PkiError as exc:
        return _fail(exc)
    return _report(args, "server certificate", files)


def run_issue_node(args: argparse.Namespace) -> int:
    try:
        files = pki.issue_node(args.dir, args.node_id, args.out, days=args.days)
    except pki.PkiError as exc:
        return _fail(exc)
    return _report(args, f"node certificate for {args.node_id}", files)


def run_issue_client(args: argparse.Namespace) -> int:
    try:
        files = pki.issue_client(args.dir, args.name, args.out, days=args.days)
    except pki.PkiError as exc:
        return _fail(exc)
    return _report(args, f"client certificate for {args.name}", files)


def run_show(args: argparse.Namespace) -> int:
    try:
        info = pki.describe(pki.load_certificate(args.file))
    except pki.PkiError as exc:
        return _fail(exc)
    if args.json:
        print_json({"file": args.file, **info})
        return 0
    names = [f"DNS:{n}" for n in info["dns_names"]] + [f"IP:{n}" for n in info["ip_addresses"]]
    state = "EXPIRED" if info["expired"] else f"{info['days_left']} days left"
    rows = [
        ("subject", info["subject"]),
        ("issuer", info["issuer"]),
        ("usage", ", ".join(info["usages"]) or "(none)"),
        ("names", ", ".join(names) or "(none)"),
        ("valid", f"{info['not_before']} to {info['not_after']} ({state})"),
        ("key", info["key"]),
        ("serial", info["serial"]),
        ("sha256", info["sha256"]),
    ]
    for label, value in rows:
        print(f"{label + ':':<9} {value}")
    return 0
