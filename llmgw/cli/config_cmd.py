"""`llmgw config`: check a configuration file, or print the configuration reference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Check a configuration file, or print the configuration reference."


def register(sub) -> None:
    parser = sub.add_parser("config", help=HELP, description=HELP)
    commands = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser))

    check = commands.add_parser(
        "check",
        help="Read a server.yaml or agent.yaml and say everything wrong with it.",
        description="Read a server.yaml or agent.yaml and say everything wrong with it: "
        "`ok` and exit 0, or one problem a line and exit 1. A file named agent.yaml "
        "is checked as an agent's; any other as a server's, unless --agent.",
    )
    check.add_argument("file", metavar="FILE", help="the file to check")
    check.add_argument("--agent", action="store_true", help="check FILE as an agent.yaml")
    check.set_defaults(handler=check_file)

    reference = commands.add_parser(
        "reference",
        help="Print every configuration key as markdown (docs/reference.md).",
        description="Print every key of server.yaml and agent.yaml, with its type, default "
        "and what it does, as markdown: `llmgw config reference > docs/reference.md`.",
    )
    reference.set_defaults(handler=print_reference)

    example = commands.add_parser(
        "example",
        help="Print a commented example server.yaml (or agent.yaml with --agent).",
        description="Print a commented example server.yaml, or agent.yaml with --agent, "
        "to start a file from.",
    )
    example.add_argument("--agent", action="store_true", help="an agent.yaml instead")
    example.set_defaults(handler=print_example)


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw config: name a subcommand: check, reference or example", file=sys.stderr)
        return 2

    return handler


def check_file(args: argparse.Namespace) -> int:
    from llmgw.config import ConfigError, load_agent_config, load_server_config

    as_agent = args.agent or Path(args.file).name in ("agent.yaml", "agent.yml")
    load = load_agent_config if as_agent else load_server_config
    try:
        config = load(args.file)
    except ConfigError as exc:
        for problem in exc.details:
            print(problem.located(exc.source), file=sys.stderr)
        return 1
    problems = [] if as_agent else _engine_problems(config)
    for problem in problems:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("ok")
    return 0


def _engine_problems(config) -> list[str]:
    """Each model's profiles against the engines installed here: the engine's allow list of args and env."""
    from llmgw.control.catalog import check_engines
    from llmgw.plugins.manager import load_plugins

    engines = load_plugins().engines()
    return [f"models[{i}].{problem}" for i, model in enumerate(config.models)
            for problem in check_engines(model, engines)]


def print_reference(args: argparse.Namespace) -> int:
    from llmgw.config.reference import reference_markdown

    sys.stdout.write(reference_markdown())
    return 0


def print_example(args: argparse.Namespace) -> int:
    from llmgw.config.examples import AGENT_EXAMPLE, SERVER_EXAMPLE

    sys.stdout.write(AGENT_EXAMPLE if args.agent else SERVER_EXAMPLE)
    return 0
