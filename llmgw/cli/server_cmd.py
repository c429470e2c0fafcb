"""`llmgw server`: run a control plane: the client API, the admin API, the scheduler and the agent endpoint.

What runs today is the client API (the gateway) on `listen` and its metrics
on `metrics_listen`; the admin API, the scheduler and the agent endpoint
come with the cluster issue.
"""

from __future__ import annotations

import argparse
import os
import sys

HELP = "Run a control plane: the client API, the admin API, the scheduler and the agent endpoint."
DEFAULT_CONFIG = "/etc/llmgw/server.yaml"


def register(sub) -> None:
    parser = sub.add_parser("server", help=HELP, description=HELP)
    parser.add_argument(
        "--config", "-c", metavar="PATH",
        default=os.environ.get("LLMGW_CONFIG", DEFAULT_CONFIG),
        help=f"server.yaml to read (default {DEFAULT_CONFIG}, or $LLMGW_CONFIG)",
    )
    parser.set_defaults(handler=run)
    # `llmgw server backup|restore`; bare `llmgw server` runs the server as before.
    from llmgw.cli import server_backup, server_init, server_kube

    server_sub = parser.add_subparsers(dest="server_command", metavar="[init|backup|restore|kube]")
    server_init.register(server_sub)
    server_backup.register(server_sub)
    server_kube.register(server_sub)


def run(args: argparse.Namespace):
    from llmgw.config import ConfigError, load_server_config

    try:
        config = load_server_config(args.config)
        from llmgw.notify.notifier import installed_sinks

        installed_sinks(config, source_file=args.config)  # a sink of a kind no plugin gives is refused here
    except ConfigError as exc:
        print(f"llmgw server: {args.config} cannot be used:", file=sys.stderr)
        for problem in exc.details:
            print(f"  {problem.located(args.config)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"llmgw server: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return _serve(config, os.path.abspath(args.config))


async def _serve(config, config_path: str | None = None) -> int:
    from llmgw.auth.key_hash import KeyHashError
    from llmgw.server import run_server
    from llmgw.store import StoreError

    try:
        code = await run_server(config, config_path=config_path)
    except KeyHashError as exc:
        print(f"llmgw server: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"llmgw server: the store cannot be used: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"llmgw server: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 1
    from llmgw.server.run import START_AGAIN

    if code == START_AGAIN:  # ctl upgrade put a new program in place: run it, in this same process
        from llmgw.agent.self_upgrade import exec_again

        exec_again()
    return code
