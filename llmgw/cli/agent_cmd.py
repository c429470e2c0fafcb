"""`llmgw agent`: run the node agent: find the hardware, supervise engines, fetch weights, report to the control planes."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "Run the node agent: find the hardware, supervise engines, fetch weights, report to the control planes."
DEFAULT_CONFIG = "/etc/llmgw/agent.yaml"


def register(sub) -> None:
    parser = sub.add_parser("agent", help=HELP, description=HELP + (
        " Stopping it (SIGTERM, Ctrl-C) leaves the engines serving; the next agent takes them over."))
    parser.add_argument("--config", "-c", default=DEFAULT_CONFIG, metavar="PATH",
                        help=f"the node's agent.yaml (default {DEFAULT_CONFIG})")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace):
    from llmgw.cli.main import UsageError
    from llmgw.config.errors import ConfigError
    from llmgw.config.load import load_agent_config

    try:
        config = load_agent_config(args.config)
    except FileNotFoundError:
        raise UsageError(f"{args.config}: no such file; write one (docs/agent.md) or give --config") from None
    except ConfigError as exc:
        print(f"llmgw agent: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        import asyncio
        import signal

        from llmgw.agent.agent import RESTART, Agent
        from llmgw.plugins.manager import PluginError

        try:
            agent = Agent(config)
            agent.config_path = args.config  # release keys in agent.yaml are relative to its folder (upgrades)
        except (ValueError, OSError, PluginError) as exc:
            print(f"llmgw agent: {exc}", file=sys.stderr)
            return 2
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(agent.stop()))
        outcome = await agent.run()
        if outcome == RESTART:
            _exec_again()
        return 0

    return main()


def _exec_again() -> None:
    """Replace this process with a fresh agent: same pid, same arguments; engines stay its children."""
    from llmgw.agent.self_upgrade import exec_again  # the one a control plane uses too

    exec_again()
