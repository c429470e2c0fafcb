"""`llmgw console`: the operator's terminal screen over the admin API (bare `llmgw` on a control plane)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator

from llmgw.cli.ctl_client import CtlError, add_client_arguments

HELP = "Open the operator's terminal console over the admin API."


def register(sub) -> None:
    parser = sub.add_parser("console", help=HELP, description=HELP + " It finds the API and its token as "
                            "`llmgw ctl` does; docs/console.md (`llmgw docs console`) describes every view and key.")
    add_client_arguments(parser, json_flag=False)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    from llmgw.console.app import ConsoleApp
    from llmgw.console.model import AdminApi

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("llmgw console: needs a terminal; `llmgw ctl` does the same from scripts", file=sys.stderr)
        return 2
    try:
        api = AdminApi.from_args(args)
    except CtlError as exc:
        if not _signed_in_through_the_provider(args, exc):
            print(f"llmgw console: {exc.message}", file=sys.stderr)
            return exc.code
        api = AdminApi.from_args(args)
    app = ConsoleApp(api)
    with _logs_kept_off_the_screen() as kept:
        await app.run_screen()
    for line in kept[-20:]:  # what went wrong while the screen was up, now that it can be read
        print(line, file=sys.stderr)
    return 0


def _signed_in_through_the_provider(args: argparse.Namespace, exc: CtlError) -> bool:
    """No admin token, and this machine's server.yaml names a single sign-on provider: sign in
    through its device flow (as `llmgw ctl signin`) rather than stop."""
    from llmgw.cli import ctl_signin

    return ctl_signin.signed_in_instead(args, exc, "llmgw console")


@contextlib.contextmanager
def _logs_kept_off_the_screen() -> Iterator[list[str]]:
    """Log lines written to the terminal would tear the screen: keep warnings aside while it is up."""
    root = logging.getLogger()
    streams = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
               and getattr(h, "stream", None) in (sys.stderr, sys.stdout)]
    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(self.format(record))

    keeper = Keep(logging.WARNING)
    if streams:
        keeper.setFormatter(streams[0].formatter)
    for h in streams:
        root.removeHandler(h)
    root.addHandler(keeper)
    try:
        yield kept
    finally:
        root.removeHandler(keeper)
        for h in streams:
            root.addHandler(h)
