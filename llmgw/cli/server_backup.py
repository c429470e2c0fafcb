"""`llmgw server backup` and `llmgw server restore`: parsing and printing; the work is llmgw.backup's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llmgw.cli.common import print_json

BACKUP_HELP = "Back up the store and the configuration into one archive (the server may be running)."
RESTORE_HELP = "Put a backup archive's store (and, with --config-too, its configuration) back; the server stopped."


def register(server_sub) -> None:
    """`backup` and `restore` under `llmgw server`; --config here leaves the one given before alone."""
    p = server_sub.add_parser(
        "backup", help=BACKUP_HELP,
        description=BACKUP_HELP + " The archive holds a consistent copy of the store (SQLite's online backup, or "
        "pg_dump for PostgreSQL), the folder server.yaml is in, the files it names (admin token, certificates) "
        "and a manifest with each file's sha256. It is written mode 0600 into backup.dir; older ones beyond "
        "backup.keep are removed. Prints the archive's path, size and sha256.")
    _config_flag(p)
    p.add_argument("--to", metavar="DIR", help="write the archive into DIR instead of backup.dir")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run_backup)

    p = server_sub.add_parser(
        "restore", help=RESTORE_HELP,
        description=RESTORE_HELP + " Every file is checked against the archive's manifest first; a damaged "
        "archive, a store from a newer llmgw, or a store in use is refused and nothing is changed. A SQLite "
        "file is replaced (the old one kept as FILE.before-restore); a PostgreSQL database is refilled with "
        "pg_restore --clean --if-exists in one transaction.")
    p.add_argument("archive", metavar="ARCHIVE", help="an llmgw-backup-….tar.gz")
    _config_flag(p)
    p.add_argument("--config-too", action="store_true",
                   help="also put the configuration files back (into the folder of --config, and the files "
                        "server.yaml names); changed ones are kept as NAME.before-restore")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when not on a terminal)")
    p.add_argument("--dry-run", action="store_true", help="check the archive and say what would be done; change nothing")
    p.set_defaults(handler=run_restore)


def _config_flag(parser: argparse.ArgumentParser) -> None:
    from llmgw.cli.server_cmd import DEFAULT_CONFIG

    parser.add_argument("--config", "-c", metavar="PATH", default=argparse.SUPPRESS,
                        help=f"the server.yaml in use (default {DEFAULT_CONFIG}, or $LLMGW_CONFIG)")


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def _load_or_say(path: str, what: str) -> Any:
    """server.yaml, or None after saying why it cannot be used."""
    from llmgw.config import ConfigError, load_server_config

    try:
        return load_server_config(path)
    except ConfigError as exc:
        print(f"llmgw server {what}: {path} cannot be used:", file=sys.stderr)
        for problem in exc.details:
            print(f"  {problem.located(path)}", file=sys.stderr)
    except OSError as exc:
        print(f"llmgw server {what}: cannot read {path}: {exc.strerror or exc}; give --config", file=sys.stderr)
    return None


def _fail(what: str, message: str, code: int = 1) -> int:
    print(f"llmgw server {what}: {message}", file=sys.stderr)
    return code


async def run_backup(args: argparse.Namespace) -> int:
    from llmgw.backup import BackupError, make_backup

    config = _load_or_say(args.config, "backup")
    if config is None:
        return 2
    try:
        result = await make_backup(config, config_path=args.config, to_dir=args.to)
    except BackupError as exc:
        return _fail("backup", str(exc))
    m = result.manifest
    if args.json:
        print_json({"path": result.path, "size": result.size, "sha256": result.sha256,
                    "created": m.created.isoformat(), "store": m.store_kind, "schema_version": m.schema_version,
                    "config_files": result.config_files, "removed": list(result.removed)})
        return 0
    print(result.path)
    print(f"  size     {size_text(result.size)}")
    print(f"  sha256   {result.sha256}")
    print(f"  holds    the {m.store_kind} store (schema version {m.schema_version}) and {result.config_files} "
          f"configuration file(s) from {m.config_dir}")
    if result.removed:
        print(f"  removed  {', '.join(result.removed)} (backup.keep: {config.backup.keep})")
    print("Keep a copy off this machine; it holds key and password hashes and private keys.")
    return 0


async def run_restore(args: argparse.Namespace) -> int:
    from llmgw.backup import BackupError
    from llmgw.backup.restore import apply_restore, check_not_in_use, plan_restore

    try:
        plan = await plan_restore(args.archive, args.config, config_too=args.config_too)
        await check_not_in_use(plan)
    except BackupError as exc:
        return _fail("restore", f"{exc}; nothing was changed")
    for line in plan.lines():
        print(line)
    if args.dry_run:
        print("Dry run: nothing was changed.")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            return _fail("restore", "not on a terminal, so nobody can be asked; pass --yes to restore", 2)
        if not _ask("Restore it? Only y goes on [y/N] "):
            print("Nothing was changed.")
            return 1
    try:
        done = await apply_restore(plan)
    except BackupError as exc:
        return _fail("restore", str(exc))
    for line in done:
        print(line)
    print("Done. Start the server again (systemctl start llmgw-server); it brings the store's schema up to date.")
    return 0


def _ask(question: str) -> bool:
    try:
        answer: Any = input(question)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
