"""`llmgw doctor`: check this machine's llmgw (control plane, node, or both) and say what to do about each problem."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Check this machine's llmgw: services, ports, certificates, store, clock, GPUs, engines, disk."
DESCRIPTION = (
    "Check this machine's llmgw, as a control plane (server.yaml in /etc/llmgw) or a node (agent.yaml), or "
    "both: services running, ports listening and connectable, certificates valid (a warning under 30 days), "
    "the store reachable and its schema version (PostgreSQL: each member's role and lag), the firewall table, "
    "each control plane reachable and the clock's skew to it, the GPU driver (none is fine: a CPU node), the engines found, and the disk free for "
    "weights. Each problem says what to do. Exit status 1 when there is a problem, 0 otherwise."
)


def register(sub) -> None:
    p = sub.add_parser("doctor", help=HELP, description=DESCRIPTION)
    p.add_argument("--root", metavar="DIR", default="/", help="the DIR `server init --root` used (default /)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace):
    from llmgw.cli.common import print_json
    from llmgw.install.doctor import run_checks, summary
    from llmgw.install.layout import Layout

    async def main() -> int:
        findings = await run_checks(Layout(Path(args.root)))
        report = summary(findings)
        if args.json:
            print_json(report)
        else:
            width = max(len(f.check) for f in findings)
            for f in findings:
                print(f"{f.status:<8} {f.check:<{width}}  {f.message}")
            print(f"\n{report['problems']} problem(s), {report['warnings']} warning(s)")
        return 0 if report["ok"] else 1

    return main()
