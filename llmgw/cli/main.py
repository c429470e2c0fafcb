"""Entry point of the `llmgw` console script and of the zipapp.

Each command group lives in its own module under `llmgw.cli` and exposes
`register(subparsers)`, which adds its parser and sets `handler` to a
function taking the parsed arguments and returning an exit status (or a
coroutine that does). Parsing and printing live here; logic lives in the
packages the handlers call.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from llmgw.obs import logs

# Order is the order `llmgw --help` lists them in.
COMMAND_MODULES = (
    "server",
    "agent",
    "mirror",
    "release",
    "bundle",
    "console",
    "ctl",
    "users",
    "keys",
    "org",
    "sim_engine",
    "up",
    "node",
    "join",
    "doctor",
    "wipe",
    "docs",
    "plugins",
    "bench",
    "config",
    "version",
    "self_upgrade",
)

# What `llmgw --help` lists for each command it does not build in full: the
# module's HELP, repeated here so that `--help` and `version` import no other
# command's code (tests/cli/test_lazy_start.py checks the two agree). A module
# missing here is imported and registered on every start.
COMMAND_SUMMARIES = {
    "server": "Run a control plane: the client API, the admin API, the scheduler and the agent endpoint.",
    "agent": "Run the node agent: find the hardware, supervise engines, fetch weights, report to the control planes.",
    "mirror": "Keep model files for the whole cluster: serve, add, list, verify, remove, import.",
    "release": "Sign llmgw releases and verify them: keygen, sign, verify (Ed25519, docs/releases.md).",
    "bundle": "Offline bundles for sites with no internet: create one, check it, import it into a mirror.",
    "console": "Open the operator's terminal console over the admin API.",
    "ctl": "Drive a running control plane through its admin API (every operation, --json).",
    "users": "Manage people: create, list, suspend, roles, memberships (against the store).",
    "keys": "Manage API keys: create, list, revoke, rotate, limits (against the store).",
    "org": "Manage organizations, teams and projects (against the store).",
    "sim_engine": "Run the simulated OpenAI-compatible engine used by tests, demos and benchmarks.",
    "up": "Start a whole cluster on this machine: control plane, agent, a model answering.",
    "node": "Add a machine as a node over SSH: checks it, copies this file there and joins it with a fresh code.",
    "join": "Make this machine a node with a join code from `llmgw ctl node join-code`.",
    "docs": "Read the manual built into llmgw: list the pages, or show one.",
    "plugins": "List the plugins this llmgw loads (engines, guard detectors, judge formats, sinks).",
    "bench": "Measure llmgw against what a user would use instead (gateway, routing, placement), and its guardrails.",
    "config": "Check a configuration file, or print the configuration reference.",
    "version": "Print llmgw's version, commit, and the Python and platform it was built for.",
    "doctor": "Check this machine's llmgw: services, ports, certificates, store, clock, GPUs, engines, disk.",
    "wipe": "Take llmgw off this machine: its services, configuration, state, certificates, user and firewall table.",
    "self_upgrade": "Replace this machine's llmgw file with a signed release from the mirror, or put the one before "
                    "back.",
}

# Options before the command that take a value (`--log-level debug`).
_GLOBAL_OPTIONS_WITH_VALUE = ("--log-level", "--log-format")


class UsageError(Exception):
    """A mistake on the command line: printed with the usage, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors exit 2 too
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command tree; given the command line, only the command it names is built in full."""
    parser = _Parser(
        prog="llmgw",
        description="llmgw: a company's own LLM service. One file, roles by subcommand.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print llmgw's version and commit, and exit")
    logs.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    wanted = None if argv is None else _command_word(argv)
    for name in COMMAND_MODULES:
        command = name.replace("_", "-")
        summary = COMMAND_SUMMARIES.get(name)
        if argv is None or summary is None or command == wanted:
            importlib.import_module(f"llmgw.cli.{name}_cmd").register(sub)
        else:
            sub.add_parser(command, help=summary, description=summary)
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The command a command line names: its first word that is not a top-level option or an option's value."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word in _GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


class _VersionAction(argparse.Action):
    """`llmgw --version`: the first line of `llmgw version`."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from llmgw.buildinfo import build_info

        info = build_info()
        print(f"llmgw {info['version']} (commit {info['commit']})")
        parser.exit(0)


def run_handler(handler, args: argparse.Namespace) -> int:
    result = handler(args)
    if result is not None and not isinstance(result, int):
        import inspect  # not on every start: it costs as much as the rest of `--help`

        if inspect.isawaitable(result):
            result = _run_async(result)
    return int(result or 0)


def _run_async(coro):
    try:
        import uvloop  # optional: a faster loop where the platform has it

        return uvloop.run(coro)
    except ImportError:
        import asyncio

        return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
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
