"""`llmgw ctl kept-requests`, `llmgw ctl requests` and `llmgw ctl request`: whose requests are kept, the
requests kept, one shown or replayed against another model, through the admin API (the same store as
`llmgw keys requests`). Registered by llmgw.cli.ctl_cmd."""

from __future__ import annotations

import shutil
import sys
import textwrap
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, register_leaf

_OFF = ("off", "none", "-")


def register(sub) -> None:
    p = sub.add_parser(
        "kept-requests", help="Keep a key's or a project's requests and answers for a time, or stop.",
        description="Show (no option) or set how long the requests of a key or of every key of a project are "
        "kept, with their answers (GET/PUT /kept-requests): --keep 7d keeps each for 7 days (at most 366d), "
        "--off stops (those kept age out). None is kept unless asked; a key's own time wins over its "
        "project's. What the guardrails redact is kept redacted; a key under a no_store policy is never kept. "
        "SCOPE is key:ID or project:PATH.")
    p.add_argument("scope", metavar="SCOPE")
    change = p.add_mutually_exclusive_group()
    change.add_argument("--keep", metavar="DURATION", help="keep each request this long, like 7d or 12h")
    change.add_argument("--off", action="store_true", help="stop keeping them")
    register_leaf(p, run_kept_requests)

    p = sub.add_parser(
        "requests", help="List the kept requests: a key's, a project's or every one.",
        description="List the kept requests, newest first (GET /requests): id, time, key, model, status and "
        "tokens, no text (`llmgw ctl request show ID` shows it). The read is written to the audit log.")
    p.add_argument("--key", metavar="KEY", help="only this key's (id or prefix)")
    p.add_argument("--project", metavar="PATH", help="only this project's")
    p.add_argument("--since", metavar="WHEN", help="from this time: 2026-09-01, an ISO time, or a span like 24h")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    register_leaf(p, run_requests)

    p = sub.add_parser(
        "request", help="Show a kept request, or replay it against another model.",
        description="`request show ID` prints a kept request: the body the model was sent and the answer the "
        "client got (GET /requests/ID; the read is written to the audit log). `request ID --replay --model "
        "OTHER` sends it again to OTHER through the gateway, as the key that sent it (its limits, budget, "
        "residency and guardrails hold; the usage is its own, tagged replay_of=ID), and prints the answer kept "
        "and the new one side by side (POST /requests/ID/replay); --json prints both whole. A replay the gateway "
        "refuses (a model the key may not use, a spent budget) exits 1 with the gateway's reason.")
    p.add_argument("words", metavar="WORD", nargs="+", help="show ID, or ID (with --replay)")
    p.add_argument("--replay", action="store_true", help="send it again, to --model")
    p.add_argument("--model", metavar="MODEL", help="the model a replay goes to")
    register_leaf(p, run_request)


def run_kept_requests(args, client: AdminClient) -> int:
    if args.keep is not None or args.off:
        keep = None if args.off or args.keep.strip().lower() in _OFF else args.keep
        info = client.request("PUT", "/kept-requests", body={"scope": args.scope, "keep": keep})
    else:
        info = client.get("/kept-requests", scope=args.scope)
    return _out(args, info, keep_line(info))


def keep_line(info: dict) -> str:
    from llmgw.config.units import Duration

    if info["keep_s"]:
        return f"{info['scope']}: requests kept {Duration(seconds=info['keep_s'])}"
    if info["in_force_s"]:
        return (f"{info['scope']}: requests kept {Duration(seconds=info['in_force_s'])}, set on its "
                f"{info['in_force_set_by']}")
    return f"{info['scope']}: requests not kept"


def run_requests(args, client: AdminClient) -> int:
    info = client.get("/requests", key=args.key, project=args.project, since=args.since, limit=args.limit)
    if args.json:
        print_json(info)
        return 0
    print_table([request_row(r) for r in info["requests"]], list(ROW_COLUMNS))
    return 0


ROW_COLUMNS = ("id", "at", "key", "model", "served", "status", "tokens", "stream", "guard")


def request_row(r: dict) -> dict[str, Any]:
    return {"id": r["id"], "at": r["at"][:19].replace("T", " "), "key": r["key_id"], "model": r["model"],
            "served": r["model_served"], "status": r["status"],
            "tokens": f"{r['prompt_tokens']}+{r['completion_tokens']}", "stream": "yes" if r["streamed"] else "",
            "guard": r["guard_action"] or ""}


def run_request(args, client: AdminClient) -> int:
    words = list(args.words)
    if words[0] == "show":
        words = words[1:]
        if args.replay:
            raise CtlError("request show ID shows it; to replay it give `request ID --replay --model OTHER` "
                           "(nothing sent)", 2)
    if len(words) != 1:
        raise CtlError("give one request id: `request show ID` or `request ID --replay --model OTHER`", 2)
    request_id = words[0]
    if args.model and not args.replay:
        raise CtlError("--model is where a replay goes: add --replay (nothing sent)", 2)
    if not args.replay:
        info = client.get(f"/requests/{_quote(request_id)}")
        if args.json:
            print_json(info)
            return 0
        import json

        s = info["summary"]
        print(f"request {s['id']}  {s['at'][:19].replace('T', ' ')}  key {s['key_id']}  {s['endpoint']}")
        print(f"model {s['model']} (served by {s['model_served'] or 'none'})  status {s['status']} {s['outcome']}  "
              f"tokens {s['prompt_tokens']}+{s['completion_tokens']}{'  streamed' if s['streamed'] else ''}"
              f"{'  guard ' + s['guard_action'] if s['guard_action'] else ''}")
        print("-- request")
        print(json.dumps(info["request"], indent=2, ensure_ascii=False))
        print("-- answer")
        print(info["text"] if info["answer"] is not None else "(none came)")
        return 0
    if not args.model:
        raise CtlError("--replay needs --model OTHER: the model to send it to (nothing sent)", 2)
    info = client.post(f"/requests/{_quote(request_id)}/replay", body={"model": args.model})
    failed = info["status"] >= 400
    if args.json:
        print_json(info)
    else:
        print(f"request {info['id']} replayed as {info['replay_request_id']} (status {info['status']})")
        print(side_by_side(f"kept: {info['model']}", info["original_text"],
                           f"replay: {info['replay_model']}", info["replayed_text"]))
    if failed:
        error = info["replayed"].get("error") if isinstance(info["replayed"], dict) else None
        reason = error.get("message") if isinstance(error, dict) else info["replayed_text"]
        print(f"llmgw ctl request: the gateway refused the replay ({info['status']}): {reason}", file=sys.stderr)
        return 1
    return 0


def side_by_side(left_title: str, left: str, right_title: str, right: str) -> str:
    """Two texts in two columns, each wrapped to half the terminal."""
    width = max(30, (shutil.get_terminal_size((120, 24)).columns - 3) // 2)

    def lines(text: str) -> list[str]:
        out: list[str] = []
        for paragraph in (text or "(empty)").splitlines() or [""]:
            out += textwrap.wrap(paragraph, width) or [""]
        return out

    a, b = [left_title[:width], "-" * min(width, len(left_title))] + lines(left), \
        [right_title[:width], "-" * min(width, len(right_title))] + lines(right)
    a += [""] * (len(b) - len(a))
    b += [""] * (len(a) - len(b))
    return "\n".join(f"{x:<{width}} | {y}".rstrip() for x, y in zip(a, b))


def _quote(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")


def _out(args, value: Any, line: str) -> int:
    print_json(value) if args.json else print(line)
    return 0


__all__ = ["keep_line", "register", "request_row", "side_by_side"]
