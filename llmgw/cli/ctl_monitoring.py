"""`llmgw ctl alerts export` and `llmgw ctl dashboards export`: the monitoring files this llmgw ships.

Files only, no server: the alert rules for Prometheus and the Grafana
dashboards, as this version of llmgw defines them (docs/monitoring.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmgw.cli.main import UsageError

ALERTS_HELP = "Print or write the alert rules for Prometheus (files only; no server needed)."
DASHBOARDS_HELP = "Write the Grafana dashboards as JSON files (files only; no server needed)."


def register(sub) -> None:
    parser = sub.add_parser("alerts", help=ALERTS_HELP, description=ALERTS_HELP)
    cmds = parser.add_subparsers(dest="alerts_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser, "alerts"))
    p = cmds.add_parser(
        "export", help="Print the rules file, or write it with --out.",
        description="Print llmgw's alert rules as a Prometheus rules file (every alert with its severity, "
        "summary and what to do), or write it to --out FILE, replacing the file whole. Name the file in "
        "prometheus.yml's rule_files; docs/monitoring.md lists the alerts.")
    p.add_argument("--out", metavar="FILE", help="write the rules here instead of printing them")
    p.set_defaults(handler=run_alerts_export)

    parser = sub.add_parser("dashboards", help=DASHBOARDS_HELP, description=DASHBOARDS_HELP)
    cmds = parser.add_subparsers(dest="dashboards_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser, "dashboards"))
    p = cmds.add_parser(
        "export", help="Write each dashboard's JSON into DIR.",
        description="Write the Grafana dashboards into DIR (made if missing), one JSON file each, replacing "
        "files of the same name: llmgw-cluster.json and llmgw-tenants.json. Import them in Grafana, or point "
        "a dashboard provider at DIR; each asks for a Prometheus data source.")
    p.add_argument("dir", metavar="DIR", help="the folder the files go in")
    p.set_defaults(handler=run_dashboards_export)


def run_alerts_export(args: argparse.Namespace) -> int:
    from llmgw.obs.monitoring_files import rules_yaml, write_file

    text = rules_yaml()
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out}: is a folder; give the file to write, like {out / 'llmgw-rules.yml'}")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist; make it first")
    try:
        write_file(out, text)
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror}; give a file you can write") from None
    from llmgw.obs.alerts import all_alerts

    print(f"{out}: {len(all_alerts())} alert rules")
    return 0


def run_dashboards_export(args: argparse.Namespace) -> int:
    from llmgw.obs.monitoring_files import dashboard_files, write_file

    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: is a file, not a folder; give the folder the dashboards go in")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        files = dashboard_files()
        for name, text in files.items():
            write_file(folder / name, text)
    except OSError as exc:
        raise UsageError(f"{folder}: {exc.strerror}; give a folder you can write") from None
    for name in files:
        print(folder / name)
    return 0


def _usage(parser: argparse.ArgumentParser, name: str):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"llmgw ctl {name}: name a subcommand; `llmgw ctl {name} --help` lists them", file=sys.stderr)
        return 2

    return handler
