"""`llmgw users`: manage people: create, list, suspend, roles, memberships (against the store)."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.cli.store_access import add_store_arguments, tenancy_command, to_json, when
from llmgw.store import MEMBER_ROLES, STAFF_ROLES, USER_STATES

HELP = "Manage people: create, list, suspend, roles, memberships (against the store)."
DESCRIPTION = (
    "Manage people: create them, list them, suspend and reinstate them, give them a staff role, "
    "and make them members of organizations, teams and projects. A person is named by email or id."
)


def register(sub) -> None:
    parser = sub.add_parser("users", help=HELP, description=DESCRIPTION)
    commands = parser.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser))

    create = commands.add_parser("create", help="Add a person.",
                                 description="Add a person, active unless --pending.")
    create.add_argument("email", metavar="EMAIL")
    create.add_argument("--name", default="", help="their name (default: the email's local part)")
    create.add_argument("--role", default="none", choices=STAFF_ROLES, help="their staff role (default: none)")
    create.add_argument("--pending", action="store_true", help="waiting for approval instead of active")
    create.add_argument("--password", metavar="PASSWORD",
                        help="a password for the portal (at least 10 characters); - reads it from standard input")
    _common(create, _create)

    lister = commands.add_parser("list", help="List people.", description="List people, by email.")
    lister.add_argument("--state", choices=USER_STATES, help="only people in this state")
    lister.add_argument("--role", choices=STAFF_ROLES, help="only people with this staff role")
    _common(lister, _list)

    for name, state, was, text in (
        ("suspend", "suspended", None, "Suspend a person: their keys stop working (403) until reinstated."),
        ("activate", "active", None, "Reinstate a suspended person, or approve one waiting."),
        ("approve", "active", "pending", "Approve a person who signed up on the portal and is waiting."),
    ):
        p = commands.add_parser(name, help=text, description=text)
        p.add_argument("user", metavar="USER", help="email or id")
        p.set_defaults(state=state, required_state=was)
        _common(p, _state)

    role = commands.add_parser("role", help="Give a person a staff role.",
                               description=f"Give a person a staff role: {', '.join(STAFF_ROLES)}.")
    role.add_argument("user", metavar="USER", help="email or id")
    role.add_argument("role", metavar="ROLE", choices=STAFF_ROLES)
    _common(role, _role)

    add = commands.add_parser("add-member", help="Make a person a member of an organization, team or project.",
                              description="Make a person a member (or, with --owner, an owner) of an "
                              "organization, team or project, named by its path.")
    add.add_argument("user", metavar="USER", help="email or id")
    add.add_argument("path", metavar="PATH", help="ORG, ORG/TEAM or ORG/TEAM/PROJECT")
    add.add_argument("--owner", action="store_true", help="as an owner rather than a member")
    _common(add, _add_member)

    remove = commands.add_parser("remove-member", help="Take a person out of an organization, team or project.",
                                 description="Take a person out of an organization, team or project. "
                                 "Their keys in it are not revoked: do that with llmgw keys revoke.")
    remove.add_argument("user", metavar="USER", help="email or id")
    remove.add_argument("path", metavar="PATH")
    _common(remove, _remove_member)

    forget = commands.add_parser(
        "forget", help="Forget a person: their keys, sessions, files and kept answers go; usage stays, unnamed.",
        description="Forget a person, for a request to be forgotten. Their keys are revoked, their portal "
        "sessions and reset links end, their memberships and own limits go, their personal files, batches (with "
        "the batches' files) and the answers kept for their personal keys are deleted. Their usage is kept, so "
        "totals and budgets stay true, under a pseudonym that links to no one; the audit log keeps what was done, "
        "under the same pseudonym. A report says what was removed; run again, it says nothing is left. It cannot "
        "be undone: give --yes.")
    forget.add_argument("user", metavar="USER", help="email or id")
    forget.add_argument("--yes", action="store_true", help="forget them (without it, nothing is changed)")
    _common(forget, _forget)

    reset = commands.add_parser(
        "reset-link", help="Make a link that sets a new portal password (once, within an hour).",
        description="Make a link that lets a person set a new portal password. It works once, for an hour; "
        "a newer link replaces it, and using it signs them out everywhere. Hand it over yourself.")
    reset.add_argument("user", metavar="USER", help="email or id")
    reset.add_argument("--base-url", metavar="URL", default="",
                       help="the portal's address, like https://llm.example.com (else only the path is printed)")
    _common(reset, _reset_link)


def _common(parser: argparse.ArgumentParser, fn) -> None:
    add_json_flag(parser)
    add_store_arguments(parser)
    parser.set_defaults(handler=tenancy_command(fn))


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw users: name a subcommand: create, list, suspend, activate, approve, role, add-member, remove-member,"
              " forget or reset-link", file=sys.stderr)
        return 2

    return handler


def user_json(user) -> dict:
    data = to_json(user)
    data.pop("password_hash", None)
    data["has_password"] = user.password_hash is not None
    return data


def _row(user) -> dict:
    return {"email": user.email, "name": user.name, "state": user.state, "role": user.role,
            "id": user.id, "created": when(user.created_at)}


async def _create(args, tenancy) -> int:
    password_hash = await _hash_password(args.password, args.email) if args.password is not None else None
    user = await tenancy.create_user(args.email, args.name, role=args.role,
                                     state="pending" if args.pending else "active")
    if password_hash is not None:
        user = await tenancy.store.set_password_hash(user.id, password_hash)
        await tenancy.store.append_audit(tenancy.actor, "users.password", f"user:{user.id}",
                                         {"email": user.email, "via": "cli", "outcome": "ok"})
    if args.json:
        print_json(user_json(user))
    else:
        print(f"created {user.email} ({user.id}), {user.state}")
    return 0


async def _list(args, tenancy) -> int:
    users = await tenancy.list_users(state=args.state, role=args.role)
    if args.json:
        print_json([user_json(u) for u in users])
    else:
        print_table([_row(u) for u in users], ["email", "name", "state", "role", "id", "created"])
    return 0


async def _state(args, tenancy) -> int:
    if args.required_state:
        current = await tenancy.find_user(args.user)
        if current.state != args.required_state:
            print(f"llmgw users: {current.email} is {current.state}, not waiting for approval; "
                  f"nothing changed", file=sys.stderr)
            return 2
    user = await tenancy.set_user_state(args.user, args.state)
    mailed = False
    if args.required_state == "pending":  # approved: told by mail when --config names a mail server
        from llmgw.cli.store_access import locate_store
        from llmgw.mail.outbox import queue_approved

        mailed = await queue_approved(tenancy.store, locate_store(args).config, user.email)
    if args.json:
        print_json({**user_json(user), **({"mailed": mailed} if args.required_state == "pending" else {})})
    else:
        print(f"{user.email} is now {user.state}")
        if args.required_state == "pending":
            print("a mail telling them is on its way" if mailed else
                  f"no mail is sent (no mail: server in --config): tell {user.email} they may sign in now")
    return 0


async def _role(args, tenancy) -> int:
    user = await tenancy.set_user_role(args.user, args.role)
    if args.json:
        print_json(user_json(user))
    else:
        print(f"{user.email} now has the staff role {user.role}")
    return 0


async def _add_member(args, tenancy) -> int:
    role = "owner" if args.owner else "member"
    assert role in MEMBER_ROLES
    m = await tenancy.add_member(args.user, args.path, role)
    if args.json:
        print_json({**to_json(m), "path": args.path})
    else:
        print(f"{args.user} is now {'an owner' if args.owner else 'a member'} of {args.path}")
    return 0


async def _remove_member(args, tenancy) -> int:
    await tenancy.remove_member(args.user, args.path)
    if args.json:
        print_json({"user": args.user, "path": args.path, "removed": True})
    else:
        print(f"{args.user} is no longer a member of {args.path}")
    return 0


def forget_report_json(report) -> dict:
    from llmgw.store.people import FORGET_PARTS

    if report is None or report.already_forgotten:
        return {"forgotten": False, "nothing_left": True,
                "pseudonym": report.pseudonym if report else None}
    return {"forgotten": True, "nothing_left": False, "pseudonym": report.pseudonym,
            "removed": {name: getattr(report, name) for name, _ in FORGET_PARTS}}


async def _forget(args, tenancy) -> int:
    from llmgw.store.people import FORGET_PARTS

    if not args.yes:
        print(f"llmgw users forget: this removes what is kept about {args.user} for good; "
              "give --yes to do it (nothing changed)", file=sys.stderr)
        return 2
    report = await tenancy.forget_user(args.user)
    if args.json:
        print_json(forget_report_json(report))
        return 0
    if report is None:
        print(f"nothing is kept about {args.user}: no one has that email or id (forgotten already, or never here)")
        return 0
    if report.already_forgotten:
        print(f"{args.user} was forgotten already (as {report.pseudonym}); nothing is left to remove")
        return 0
    print(f"forgot {args.user}; their usage is kept as {report.pseudonym}")
    for name, words in FORGET_PARTS:
        print(f"  {words}: {getattr(report, name)}")
    return 0


async def _hash_password(given: str, email: str) -> str:
    from llmgw.auth.passwords import Passwords, check_strength

    password = sys.stdin.readline().rstrip("\r\n") if given == "-" else given
    check_strength(password, email=email)  # a WeakPassword is a ValueError: one line, exit 2
    hasher = Passwords()
    try:
        return await hasher.hash(password)
    finally:
        hasher.close()


async def _reset_link(args, tenancy) -> int:
    from llmgw.auth.sessions import RESET_PATH, RESET_TTL, issue_reset, reset_link
    from llmgw.store import Conflict

    user = await tenancy.find_user(args.user)
    if user.password_hash is None:
        raise Conflict(f"{user.email} has no password here (they sign in through single sign-on); no link is made")
    if user.state != "active":
        raise Conflict(f"{user.email} is {user.state}; a link is made only for an active person")
    now = tenancy.now()
    token = await issue_reset(tenancy.store, user.id, now)
    await tenancy.store.append_audit(tenancy.actor, "users.reset-link", f"user:{user.id}",
                                     {"email": user.email, "via": "cli", "outcome": "ok"})
    link = reset_link(args.base_url, token) if args.base_url else RESET_PATH + token
    expires = now + RESET_TTL
    if args.json:
        print_json({"user": user.email, "link": link, "expires_at": expires.isoformat()})
    else:
        print(link)
        where = "" if args.base_url else " after the portal's address (or give --base-url)"
        print(f"works once, until {when(expires)}; hand it to {user.email} yourself{where}", file=sys.stderr)
    return 0
