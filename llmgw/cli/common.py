"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable


def not_built(what: str, issue: str) -> Callable[[argparse.Namespace], int]:
    """A handler for a command whose issue has not landed: one line, exit 2."""

    def handler(args: argparse.Namespace) -> int:
        print(f"llmgw {what}: not built yet (comes with {issue})", file=sys.stderr)
        return 2

    return handler


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Plain aligned columns, headers in capitals; an empty list says so."""
    if not rows:
        print("(none)")
        return
    cells = [[str(r.get(c, "") if r.get(c) is not None else "") for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def usage_of(parser: argparse.ArgumentParser, what: str) -> Callable[[argparse.Namespace], int]:
    """A handler for a group named without a subcommand: its usage and one line, exit 2."""

    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"llmgw {what}: name a subcommand; `llmgw {what} --help` lists them", file=sys.stderr)
        return 2

    return handler
