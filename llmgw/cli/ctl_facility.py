"""`llmgw ctl facility [list|hold|release]`: racks, PDUs and their power, and holds for maintenance."""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, quote, register_leaf

DESCRIPTION = (
    "The facility as placement sees it: every rack, PDU, row, room and site the nodes' llmgw.io/ labels name or "
    "facility.budgets gives, with its nodes, its hold and its power; and holds, which keep a node:, rack:, pdu:, "
    "row:, room:, site: or card:NODE:INDEX domain free of new replicas for maintenance."
)


def register(sub) -> None:
    parser = sub.add_parser("facility", help="Racks, PDUs and their power budgets; hold and release them.",
                            description=DESCRIPTION)
    register_leaf(parser, run_list)
    cmds = parser.add_subparsers(dest="facility_command", metavar="SUBCOMMAND")
    p = cmds.add_parser("list", help="Every domain with its nodes, hold and power, and every hold.",
                        description="Every domain with its nodes, hold and power (cap, the limit placement fills "
                        "to, in use, measured), and every hold.")
    register_leaf(p, run_list)
    p = cmds.add_parser("hold", help="Keep a domain free of new replicas, with a reason and an end.",
                        description="Keep a domain free: nothing new is placed on its nodes (for card:NODE:INDEX, "
                        "on that card) until `release` or --until; what runs there stays unless --drain.")
    p.add_argument("domain", metavar="DOMAIN", help="rack:r12-07, pdu:r12-07-a, node:gpu01, card:gpu01:3, …")
    p.add_argument("--reason", required=True, help="why, shown in explain-placement and the audit log")
    p.add_argument("--until", help="when it ends: an ISO 8601 time or a span from now such as 4h")
    p.add_argument("--drain", action="store_true", help="also move its replicas off, each replacement up first")
    register_leaf(p, run_hold)
    p = cmds.add_parser("release", help="Take a hold off (a drain it began stops).",
                        description="Take a domain's hold off; a drain it began stops, what has moved stays moved.")
    p.add_argument("domain", metavar="DOMAIN")
    register_leaf(p, run_release)


def _kw(watts) -> str:
    return "" if watts is None else f"{watts / 1000:.1f} kW"


def run_list(args: argparse.Namespace, client: AdminClient) -> int:
    report = client.get("/facility")
    if args.json:
        print_json(report)
        return 0
    print_table([{"domain": d["domain"], "nodes": ",".join(d["nodes"]) or "-", "cap": _kw(d["cap_watts"]),
                  "limit": _kw(d["limit_watts"]), "in_use": _kw(d["in_use_watts"]),
                  "measured": _kw(d["measured_watts"]), "held": d["held"]} for d in report["domains"]],
                ["domain", "nodes", "cap", "limit", "in_use", "measured", "held"])
    if report["holds"]:
        print()
        print_table([{"hold": h["domain"], "reason": h["reason"], "until": h["until"] or "released by hand",
                      "drain": "yes" if h["drain"] else "", "by": h["actor"],
                      "state": "active" if h["active"] else "ended"} for h in report["holds"]],
                    ["hold", "reason", "until", "drain", "by", "state"])
    return 0


def run_hold(args: argparse.Namespace, client: AdminClient) -> int:
    hold = client.post("/facility/holds", {"domain": args.domain, "reason": args.reason, "until": args.until,
                                            "drain": args.drain})
    if args.json:
        print_json(hold)
    else:
        end = f" until {hold['until']}" if hold["until"] else " until released"
        print(f"{hold['domain']}: held{end}" + (", draining" if hold["drain"] else "") + f" ({hold['reason']})")
    return 0


def run_release(args: argparse.Namespace, client: AdminClient) -> int:
    hold = client.request("DELETE", f"/facility/holds/{quote(args.domain)}")
    if args.json:
        print_json(hold)
    else:
        print(f"{hold['domain']}: released")
    return 0
