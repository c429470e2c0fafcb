"""`llmgw ctl`: drive a running control plane through its admin API (every operation, --json).

Each group of commands is a module with `register(subparsers)`: `ctl_cert`
(files only, no server), `ctl_cluster` (status, nodes, models, placement),
`ctl_ops` (quotas, usage, audit, settings, the OpenAPI document) and
`ctl_people` (orgs, users, keys, limits). `ctl_client` is how they reach the
API. A new group is one module and one line below.
"""

from __future__ import annotations

import argparse
import sys

from llmgw.cli import ctl_cert, ctl_cluster, ctl_guard, ctl_jobs, ctl_ops, ctl_people
from llmgw.cli import ctl_server_config
from llmgw.cli import ctl_backup
from llmgw.cli import ctl_notify
from llmgw.cli import ctl_engines
from llmgw.cli import ctl_facility
from llmgw.cli import ctl_monitoring
from llmgw.cli import ctl_signin
from llmgw.cli import ctl_federation
from llmgw.cli import ctl_kept  # kept requests

HELP = "Drive a running control plane through its admin API (every operation, --json)."
DESCRIPTION = (
    "Drive a running control plane through its admin API: the fleet, models, placement, quotas, usage, the "
    "audit log, settings and people. Tables for people, --json for scripts. The API is --admin URL "
    "($LLMGW_ADMIN_URL, default http://127.0.0.1:9090); the token --token-file ($LLMGW_ADMIN_TOKEN, default "
    "the server's admin_token_file)."
)


def register(sub) -> None:
    parser = sub.add_parser("ctl", help=HELP, description=DESCRIPTION)
    parser.set_defaults(handler=_usage(parser))
    ctl_sub = parser.add_subparsers(dest="ctl_command", metavar="COMMAND")
    ctl_cluster.register(ctl_sub)
    ctl_facility.register(ctl_sub)
    ctl_jobs.register(ctl_sub)
    ctl_engines.register(ctl_sub)
    ctl_ops.register(ctl_sub)
    ctl_backup.register(ctl_sub)
    ctl_notify.register(ctl_sub)
    ctl_server_config.register(ctl_sub)
    ctl_people.register(ctl_sub)
    ctl_cert.register(ctl_sub)
    ctl_guard.register(ctl_sub)
    ctl_monitoring.register(ctl_sub)
    ctl_signin.register(ctl_sub)
    ctl_federation.register(ctl_sub)
    ctl_kept.register(ctl_sub)  # kept requests
    from llmgw.cli import ctl_upgrade

    ctl_upgrade.register(ctl_sub)  # ctl upgrade RELEASE


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw ctl: name a command; `llmgw ctl --help` lists them", file=sys.stderr)
        return 2

    return handler
