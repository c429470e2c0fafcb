"""Entry point of the `llmgw` console script and of the zipapp.

Each command group lives in its own module under `llmgw.cli` and exposes
`register(subparsers)`, which adds its parser and sets `handler` to a
function taking the parsed arguments and returning an exit status (or a
coroutine that does). Parsing and printing live here; logic lives in the
packages the handlers call.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys

from llmgw.obs import logs

# Order is the order `llmgw --help` lists them in.
COMMAND_MODULES = (
    "server",
    "agent",
    "mirror",
    "console",
    "ctl",
    "users",
    "keys",
    "org",
    "sim_engine",
    "up",
    "docs",
    "plugins",
    "bench",
    "config",
    "version",
)


class UsageError(Exception):
    """A mistake on the command line: printed with the usage, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors exit 2 too
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="llmgw",
        description="llmgw: a company's own LLM service. One file, roles by subcommand.",
    )
    logs.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"llmgw.cli.{name}_cmd")
        module.register(sub)
    return parser


def run_handler(handler, args: argparse.Namespace) -> int:
    result = handler(args)
    if inspect.isawaitable(result):
        result = _run_async(result)
    return int(result or 0)


def _run_async(coro):
    try:
        import uvloop  # optional: a faster loop where the platform has it

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.setup(level=args.log_level, fmt=args.log_format)
    handler = getattr(args, "handler", None)
    if handler is None:
        if args.command is None:
            default = _default_command()
            if default is not None:
                return main([*(argv or sys.argv[1:]), default])
        parser.print_usage(sys.stderr)
        print("llmgw: error: name a command; `llmgw --help` lists them", file=sys.stderr)
        return 2
    try:
        return run_handler(handler, args)
    except UsageError as exc:
        print(f"llmgw {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`llmgw plugins | head`): not an error of ours.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _default_command() -> str | None:
    """Bare `llmgw` on a terminal opens the console where an admin token is found (a control plane)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    from llmgw.console.model.api import admin_token_found

    return "console" if admin_token_found() else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
