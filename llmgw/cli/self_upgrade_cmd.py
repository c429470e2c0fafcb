"""`llmgw self-upgrade RELEASE`: put a signed release's zipapp in place of this machine's llmgw (a control plane's).

What `ctl upgrade` has each agent do, for a machine the operator upgrades
himself: the release's SHA256SUMS and this machine's zipapp fetched from
the mirror's file server, checked against the keys of the configuration
given (server.yaml's `releases`, the built-in keys), renamed over the
program with the file before kept as PROGRAM.previous. It does not restart
anything: the operator restarts the service (`systemctl restart
llmgw-server`), standbys first, then the leader, whose lease is released as
it stops so a standby leads at once (docs/upgrades.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "Replace this machine's llmgw file with a signed release from the mirror, or put the one before back."


def register(sub) -> None:
    p = sub.add_parser("self-upgrade", help=HELP, description=HELP + (
        " The release's SHA256SUMS must be signed by a key the configuration's `releases` trusts (or a built-in "
        "one) and the zipapp must match it and say it is RELEASE; otherwise nothing changes. The file before is "
        "kept as PROGRAM.previous (--back swaps them). Nothing is restarted: restart the service yourself "
        "(docs/upgrades.md)."))
    p.add_argument("release", nargs="?", default="", metavar="RELEASE", help="the release's version, like 0.2.0")
    p.add_argument("--mirror", default="", metavar="URL",
                   help="the mirror's file server (default: server.yaml's mirror.url)")
    p.add_argument("--config", "-c", default="/etc/llmgw/server.yaml", metavar="PATH",
                   help="the server.yaml whose releases keys are trusted (default /etc/llmgw/server.yaml)")
    p.add_argument("--program", default="", metavar="PATH",
                   help="the file to replace (default: the zipapp running this command, else "
                        "/usr/local/lib/llmgw/llmgw.pyz)")
    p.add_argument("--back", action="store_true", help="put PROGRAM.previous back instead")
    p.set_defaults(handler=run)


def _program(given: str) -> Path:
    if given:
        return Path(given)
    if os.environ.get("LLMGW_PYZ"):
        return Path(os.environ["LLMGW_PYZ"])
    from llmgw.install.layout import Layout

    return Layout().binary


def run(args: argparse.Namespace) -> int:
    from llmgw.agent.self_upgrade import UpgradeRefused, put_back_previous, replace_program
    from llmgw.cli.main import UsageError

    if bool(args.release) == bool(args.back):
        raise UsageError("give RELEASE to upgrade to, or --back, one of them")
    program = _program(args.program)
    if not program.is_file():
        print(f"llmgw self-upgrade: {program}: no such file; give --program PATH", file=sys.stderr)
        return 2
    try:
        if args.back:
            done = put_back_previous(program)
        else:
            import asyncio

            from llmgw.config.errors import ConfigError
            from llmgw.release.keys import KeyError_
            from llmgw.release.trust import trust_for_config

            try:
                trust = trust_for_config(args.config)
                mirror = args.mirror
                if not mirror:
                    from llmgw.config import load_server_config

                    mirror = load_server_config(args.config).mirror.url
            except FileNotFoundError:
                print(f"llmgw self-upgrade: {args.config}: no such file; give --config", file=sys.stderr)
                return 2
            except (ConfigError, KeyError_) as exc:
                print(f"llmgw self-upgrade: {exc}", file=sys.stderr)
                return 2
            done = asyncio.run(replace_program(program, version=args.release, mirror=mirror, trust=trust))
    except (UpgradeRefused, OSError) as exc:
        print(f"llmgw self-upgrade: not upgraded: {exc}", file=sys.stderr)
        return 1
    print(f"llmgw {done.version} is in place at {done.program} (the file before is {done.previous}); restart the "
          "service to run it: systemctl restart llmgw-server")
    return 0
