"""`llmgw server init`: set up a control plane on this machine, as a form on a terminal or from flags with --yes."""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from pathlib import Path

HELP = "Set up a control plane on this machine: configuration, certificates, administrator, services, firewall."
DESCRIPTION = (
    "Set up a control plane on a bare machine. On a terminal it asks for each field, with a default; "
    "with --yes it takes the flags (and the defaults) without asking. Every field is checked first, the "
    "store connected to, and only then is anything written: server.yaml, the cluster CA and the server "
    "certificate, the admin token, agent.yaml and a node certificate with --node, the administrator "
    "account, the systemd units and the firewall table. It then starts the services and waits until the "
    "client API answers. Run again, it keeps what exists and says so, item by item."
)


def register(server_sub) -> None:
    p = server_sub.add_parser("init", help=HELP, description=DESCRIPTION)
    p.add_argument("--yes", "-y", action="store_true",
                   help="ask nothing: take the flags, and the defaults for the rest")
    p.add_argument("--dry-run", action="store_true",
                   help="check everything, print every file and rule it would write, write nothing")
    p.add_argument("--root", metavar="DIR", default="/",
                   help="put everything under DIR (DIR/etc/llmgw, DIR/var/lib/llmgw, ...) instead of /")
    f = p.add_argument_group("the form's fields")
    f.add_argument("--host", dest="hosts", action="append", metavar="NAME",
                   help="a name or address nodes reach this machine by; repeat for each "
                   "(default: its host name and primary address)")
    f.add_argument("--admin", dest="admin_email", metavar="EMAIL", help="the administrator's email")
    f.add_argument("--admin-password", metavar="PASSWORD",
                   help="their first password, 10 characters or more; - reads it from standard input "
                   "(default: one is made and printed once)")
    f.add_argument("--store", metavar="PATH|DSN",
                   help="a SQLite file (default DIR/var/lib/llmgw/llmgw.db), or postgres://USER:PASSWORD@HOST/DB")
    f.add_argument("--mirror", metavar="none|here|URL",
                   help="the model mirror: none (default), here (this machine serves model files), or its URL")
    f.add_argument("--node", action=argparse.BooleanOptionalAction, default=None,
                   help="this machine is also a node and runs models (default: no)")
    f.add_argument("--node-id", metavar="ID", help="its node id (default: the host name)")
    f.add_argument("--engine-user", metavar="NAME",
                   help="with --node: the user engines run as (default llmgw-engine; empty runs them as root)")
    f.add_argument("--model", metavar="none|sim|ORG/REPO",
                   help="a first model: none, sim (simulated, no weights) or a GGUF repository for llama.cpp "
                   "(default: sim with --node, else none)")
    n = p.add_argument_group("listeners and firewall")
    n.add_argument("--listen", default=":8080", metavar="HOST:PORT", help="the client API (default :8080)")
    n.add_argument("--admin-listen", default="127.0.0.1:9090", metavar="HOST:PORT",
                   help="the admin API (default 127.0.0.1:9090; with --admin-from, every interface on that port)")
    n.add_argument("--agent-listen", default=":7443", metavar="HOST:PORT", help="the agent port (default :7443)")
    n.add_argument("--metrics-listen", default=":9091", metavar="HOST:PORT", help="metrics (default :9091)")
    n.add_argument("--mirror-listen", default=":8081", metavar="HOST:PORT",
                   help="with --mirror here: its file server (default :8081)")
    n.add_argument("--mirror-api-listen", default="127.0.0.1:8082", metavar="HOST:PORT",
                   help="with --mirror here: its API, for this control plane (default 127.0.0.1:8082)")
    n.add_argument("--admin-from", action="append", default=[], metavar="CIDR",
                   help="open the admin API to this network too (repeat); otherwise loopback only")
    n.add_argument("--nodes-from", action="append", default=[], metavar="CIDR",
                   help="the nodes' network: only it reaches the agent port and the mirror (default: everyone)")
    n.add_argument("--metrics-from", action="append", default=[], metavar="CIDR",
                   help="who may scrape metrics besides loopback (repeat)")
    n.add_argument("--no-firewall", dest="firewall", action="store_false",
                   help="write and apply no firewall table")
    b = p.add_argument_group("a site with no internet (docs/releases.md)")
    b.add_argument("--bundle", default="", metavar="BUNDLE",
                   help="with --mirror here: import this offline bundle (llmgw bundle create) into the mirror, "
                   "checked whole before anything is written, and mark the cluster offline (mirror.offline)")
    b.add_argument("--bundle-sha256", default="", metavar="HEX", help="the sha256 `bundle create` printed for it")
    b.add_argument("--trust", action="append", default=[], metavar="PUBKEY",
                   help="a release key (a .pub file or its base64) the bundle may be signed by, beside the "
                   "built-in ones; written into server.yaml's releases.trusted_keys (repeatable)")
    p.add_argument("--no-start", dest="start", action="store_false", help="install, but start nothing")
    p.add_argument("--wait", type=float, default=180.0, metavar="SECONDS",
                   help="how long to wait for the server to answer (default 180)")
    from llmgw.cli.server_patroni import add_arguments as add_patroni_arguments

    add_patroni_arguments(p)
    p.set_defaults(handler=run)


# (name, question, explanation); the defaults come from the flags and the machine.
FORM = (
    ("hosts", "Names and addresses", "Nodes reach this machine by these; each goes into its certificate. "
     "Separate them with commas."),
    ("admin_email", "Administrator's email", "The first account, with the staff role admin, for the portal "
     "and the console."),
    ("admin_password", "Their first password", "10 characters or more; leave it empty to have one made "
     "and printed once."),
    ("store", "Store", "A SQLite file for one control plane, or postgres://USER:PASSWORD@HOST/DB to share one "
     "among several; a PostgreSQL address is connected to before anything is written."),
    ("mirror", "Mirror", "none: each node fetches weights from the model's source; here: this machine keeps "
     "model files for the whole cluster; or the URL of a mirror elsewhere."),
    ("node", "Is this machine a node too", "yes: it runs models itself (an agent beside the control plane)."),
    ("node_id", "Its node id", "The name it has in the cluster and in its certificate."),
    ("model", "First model", "none; sim, a simulated model needing no weights; or a Hugging Face repository "
     "of GGUF files, run by llama.cpp on CPUs."),
)


def _ask(question: str, explanation: str, default: str, *, secret: bool = False) -> str:
    print(f"\n{question}\n  {explanation}")
    if secret:
        return getpass.getpass("  > ")
    answer = input(f"  [{default}] > " if default else "  > ").strip()
    return answer or default


def _gather(args: argparse.Namespace, layout) -> dict:
    from llmgw.install.init import default_hosts

    hostname = socket.gethostname()
    values = {
        "hosts": args.hosts or default_hosts(),
        "admin_email": args.admin_email or "",
        "admin_password": args.admin_password,
        "store": args.store or "",
        "mirror": args.mirror or "none",
        "node": bool(args.node),
        "node_id": args.node_id or hostname,
        "engine_user": args.engine_user,
        "model": args.model,
    }
    if args.admin_password == "-":
        values["admin_password"] = sys.stdin.readline().rstrip("\r\n")
    interactive = not args.yes
    if interactive:
        print("llmgw server init: a control plane on this machine. Enter keeps the default in [brackets].")
        for name, question, explanation in FORM:
            if name == "hosts" and not args.hosts:
                values["hosts"] = [h.strip() for h in _ask(question, explanation, ", ".join(values["hosts"]))
                                   .split(",") if h.strip()]
            elif name == "admin_email" and not args.admin_email:
                values["admin_email"] = _ask(question, explanation, "")
            elif name == "admin_password" and args.admin_password is None:
                values["admin_password"] = _ask(question, explanation, "", secret=True) or None
            elif name == "store" and not args.store:
                values["store"] = _ask(question, explanation, str(layout.store))
            elif name == "mirror" and not args.mirror:
                values["mirror"] = _ask(question, explanation, "none")
            elif name == "node" and args.node is None:
                values["node"] = _ask(question, explanation, "no").lower() in ("y", "yes", "true", "1")
            elif name == "node_id" and values["node"] and not args.node_id:
                values["node_id"] = _ask(question, explanation, hostname)
            elif name == "model" and not args.model:
                values["model"] = _ask(question, explanation, "sim" if values["node"] else "none")
    if values["model"] is None:
        values["model"] = "sim" if values["node"] else "none"
    if values["store"] == str(layout.store):
        values["store"] = ""
    return values


def run(args: argparse.Namespace):
    from llmgw.install.init import InitError, InitOptions, Installer
    from llmgw.install.layout import Layout

    if getattr(args, "patroni", False):  # a replicated store's files, not a control plane
        from llmgw.cli.server_patroni import run as write_patroni

        return write_patroni(args)
    layout = Layout(Path(args.root))
    if not args.yes and not sys.stdin.isatty():
        print("llmgw server init: no terminal to ask on; give --yes and the fields as flags "
              "(--admin EMAIL at least)", file=sys.stderr)
        return 2
    try:
        values = _gather(args, layout)
    except (EOFError, KeyboardInterrupt):
        print("\nllmgw server init: stopped; nothing was written", file=sys.stderr)
        return 130
    opts = InitOptions(
        **values, listen=args.listen, admin_listen=args.admin_listen, agent_listen=args.agent_listen,
        metrics_listen=args.metrics_listen, mirror_listen=args.mirror_listen,
        mirror_api_listen=args.mirror_api_listen, admin_from=args.admin_from, nodes_from=args.nodes_from,
        metrics_from=args.metrics_from, firewall=args.firewall, start=args.start, wait=args.wait,
        bundle=args.bundle, bundle_sha256=args.bundle_sha256, trust=args.trust,
    )

    def say(text: str) -> None:
        print(f"  {text}", flush=True)

    async def main() -> int:
        installer = Installer(layout, opts, say)
        try:
            await installer.check()
        except InitError as exc:
            print("llmgw server init: nothing was written:", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
            return 2
        if args.dry_run:
            sys.stdout.write(installer.preview())
            return 0
        print(f"llmgw server init: setting up a control plane under {layout.root}")
        try:
            await installer.install()
            urls = await installer.start() if opts.start else None
        except InitError as exc:
            print("llmgw server init: " + "; ".join(exc.problems), file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"llmgw server init: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # a PkiError, a ServiceError, a FirewallError or a StoreError: one sentence
            print(f"llmgw server init: {exc}", file=sys.stderr)
            return 1
        _summary(installer, urls, layout)
        return 0

    return main()


def _summary(installer, urls: dict[str, str] | None, layout) -> None:
    ctl = "llmgw ctl"
    flags = ""
    if not layout.system or (urls and urls["admin"] != "http://127.0.0.1:9090"):
        flags = f" --admin {urls['admin'] if urls else 'URL'} --token-file {layout.admin_token}"
    print()
    if urls:
        print("The control plane answers.")
        print(f"  client API     {urls['client']}")
        print(f"  admin API      {urls['admin']} (token in {layout.admin_token})")
    else:
        print("Installed; nothing started (--no-start).")
    print(f"  configuration  {layout.server_yaml}")
    print(f"  certificates   {layout.tls} (the CA: {layout.ca_dir})")
    print(f"  state          {layout.state}")
    from llmgw.install.service import systemd_runs

    print(f"  logs           {'journalctl -u llmgw-server' if systemd_runs(layout) else layout.logs}")
    if installer.generated_password:
        print(f"\nThe administrator {installer.opts.admin_email}'s password, shown once (copy it now): "
              f"{installer.generated_password}")
    print("\nNext:")
    print(f"  {ctl} status{flags}                 the cluster at a glance")
    print(f"  {ctl} node join-code{flags}         a code for `llmgw join CODE` on a new node")
    print("  llmgw node add USER@HOST          install a node over ssh")
    print(f"  llmgw doctor{' --root ' + str(layout.root) if not layout.system else ''}"
          "                      check this machine")
