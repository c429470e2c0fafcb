"""`llmgw plugins`: list the plugins this llmgw loads and what each contributes."""

from __future__ import annotations

import sys

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.plugins.manager import PluginError, load_plugins

HELP = "List the plugins this llmgw loads (engines, guard detectors, judge formats, sinks)."


def register(sub) -> None:
    parser = sub.add_parser("plugins", help=HELP, description=HELP + " LLMGW_PLUGINS=a,b restricts which load.")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    try:
        plugins = load_plugins()
    except PluginError as exc:
        print(f"llmgw plugins: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json([
            {"name": i.name, "distribution": i.distribution, "version": i.version,
             "module": i.module, "contributes": i.contributes}
            for i in plugins.infos
        ])
        return 0
    rows = [
        {
            "plugin": i.name,
            "version": i.version,
            "distribution": i.distribution,
            "contributes": "; ".join(f"{label}: {', '.join(names)}" for label, names in i.contributes.items()),
        }
        for i in sorted(plugins.infos, key=lambda i: i.name)
    ]
    print_table(rows, ["plugin", "version", "distribution", "contributes"])
    return 0
