"""`llmgw ctl`: drive a running control plane through its admin API (every operation, --json)."""

from __future__ import annotations

import argparse

from llmgw.cli import ctl_cert
from llmgw.cli.common import not_built

HELP = "Drive a running control plane through its admin API (every operation, --json)."
ISSUE = "issue #5 (the admin API)"


class _CtlCommands(argparse._SubParsersAction):
    """ctl's subcommands: those built parse as usual; any other name answers "not built yet"."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.choices = None  # let unknown names reach __call__ instead of argparse's "invalid choice"

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values[0] not in self._name_parser_map:
            namespace.handler = not_built(f"ctl {values[0]}", ISSUE)
            return
        super().__call__(parser, namespace, values, option_string)


def register(sub) -> None:
    parser = sub.add_parser("ctl", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("ctl", ISSUE))
    ctl_sub = parser.add_subparsers(dest="ctl_command", metavar="COMMAND", action=_CtlCommands)
    ctl_cert.register(ctl_sub)
