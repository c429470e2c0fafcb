"""`llmgw version`: the version, the commit and what it was built for."""

from __future__ import annotations

import os

from llmgw.buildinfo import build_info, zipapp_path
from llmgw.cli.common import add_json_flag, print_json

HELP = "Print llmgw's version, commit, and the Python and platform it was built for."


def register(sub) -> None:
    parser = sub.add_parser("version", help=HELP, description=HELP)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    info = dict(build_info())
    pyz = zipapp_path()
    if pyz:
        info["zipapp"] = pyz
        root = os.environ.get("LLMGW_UNPACKED") or os.environ.get("SHIV_ROOT")
        if root:
            info["extracted_to"] = root
    if args.json:
        print_json(info)
        return 0
    print(f"llmgw {info['version']} (commit {info['commit']})")
    if info.get("built_python"):
        built = info["built_python"]
        if info.get("built_platform"):
            built += f" on {info['built_platform']}"
        print(f"built for: {built}")
    print(f"running on: {info['python']}, {info['platform']}")
    if "zipapp" in info:
        print(f"zipapp: {info['zipapp']}")
    if "extracted_to" in info:
        print(f"extracted to: {info['extracted_to']}")
    return 0
