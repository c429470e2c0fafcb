"""`llmgw docs`: the manual built into llmgw."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from llmgw.cli.common import add_json_flag, print_json
from llmgw.manual import PageNotFound, find, pages

HELP = "Read the manual built into llmgw: list the pages, or show one."


def register(sub) -> None:
    parser = sub.add_parser("docs", help=HELP, description=HELP + " Paged on a terminal, plain when piped.")
    parser.add_argument("page", nargs="?", help="the page to show, e.g. gateway or reference")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    if not args.page:
        listing = [{"page": p.name, "title": p.title} for p in pages().values()]
        if args.json:
            print_json(listing)
            return 0
        if not listing:
            print("llmgw docs: this llmgw was built without its manual", file=sys.stderr)
            return 1
        width = max(len(p["page"]) for p in listing)
        for p in listing:
            print(f"{p['page'].ljust(width)}  {p['title']}")
        print("\nllmgw docs PAGE shows one.")
        return 0
    try:
        page = find(args.page)
    except PageNotFound as exc:
        print(f"llmgw docs: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print_json({"page": page.name, "title": page.title, "text": page.text})
        return 0
    _show(page.text)
    return 0


def _show(text: str) -> None:
    if not sys.stdout.isatty():
        sys.stdout.write(text)
        return
    pager = os.environ.get("PAGER") or ("less" if shutil.which("less") else "")
    if not pager:
        sys.stdout.write(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    try:
        subprocess.run(pager, shell=True, input=text.encode(), env=env, check=False)
    except OSError:
        sys.stdout.write(text)
