"""`llmgw server backup` and `llmgw server restore`: parsing and printing; the work is llmgw.backup's."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from llmgw.cli.common import print_json

BACKUP_HELP = "Back up the store and the configuration into one archive (the server may be running)."
RESTORE_HELP = "Put a backup archive's store (and, with --config-too, its configuration) back; the server stopped."
DRILL_HELP = "Restore an archive into a scratch folder and check the store opens and its row counts match."
KEYGEN_HELP = "Make an age key pair for encrypted backups: the private key into FILE, the recipient printed."


def register(server_sub) -> None:
    """`backup` and `restore` under `llmgw server`; --config here leaves the one given before alone."""
    p = server_sub.add_parser(
        "backup", help=BACKUP_HELP,
        description=BACKUP_HELP + " The archive holds a consistent copy of the store (SQLite's online backup, or "
        "pg_dump for PostgreSQL), the folder server.yaml is in, the files it names (admin token, certificates) "
        "and a manifest with each file's sha256. It is written mode 0600 into backup.dir; older ones beyond "
        "backup.keep are removed. With backup.encrypt_to or backup.passphrase_file it is encrypted with age "
        "(NAME.tar.gz.age). Each archive is read back and checked against its manifest, then copied to each "
        "of backup.copy_to. Prints the archive's path, size and sha256.")
    _config_flag(p)
    p.add_argument("--to", metavar="DIR", help="write the archive into DIR instead of backup.dir (and copy it "
                                               "nowhere else)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run_backup)
    backup_sub = p.add_subparsers(dest="backup_command", metavar="[drill|keygen]")
    d = backup_sub.add_parser(
        "drill", help=DRILL_HELP,
        description=DRILL_HELP + " The archive is read whole and every file checked against its manifest, "
        "the store is restored into a scratch folder (removed afterwards) and opened by llmgw, and the rows of "
        "each table are counted against the counts the manifest took when the archive was made. Nothing of "
        "this machine's store or configuration is touched. Exit code 0 when every count matches, 1 when one "
        "does not (or the archive has no counts), 2 when the archive cannot be restored at all.")
    d.add_argument("archive", metavar="ARCHIVE", help="an llmgw-backup-….tar.gz or ….tar.gz.age")
    _opener_flags(d)
    d.add_argument("--into", metavar="DSN",
                   help="for a PostgreSQL store: the address of an empty database to restore into (left restored "
                        "afterwards, for you to drop)")
    d.add_argument("--json", action="store_true", help="print the result as JSON")
    d.set_defaults(handler=run_drill)
    k = backup_sub.add_parser(
        "keygen", help=KEYGEN_HELP,
        description=KEYGEN_HELP + " Put the recipient (age1…) in backup.encrypt_to and keep FILE off the "
        "control plane (it is what reads the archives: `server restore --identity FILE`). FILE is written "
        "mode 0600 and never replaced.")
    k.add_argument("file", metavar="FILE", help="where the private key goes (must not exist)")
    k.set_defaults(handler=run_keygen)

    p = server_sub.add_parser(
        "restore", help=RESTORE_HELP,
        description=RESTORE_HELP + " Every file is checked against the archive's manifest first; a damaged "
        "archive, a store from a newer llmgw, or a store in use is refused and nothing is changed. A SQLite "
        "file is replaced (the old one kept as FILE.before-restore); a PostgreSQL database is refilled with "
        "pg_restore --clean --if-exists in one transaction.")
    p.add_argument("archive", metavar="ARCHIVE", help="an llmgw-backup-….tar.gz or ….tar.gz.age")
    _config_flag(p)
    _opener_flags(p)
    p.add_argument("--config-too", action="store_true",
                   help="also put the configuration files back (into the folder of --config, and the files "
                        "server.yaml names); changed ones are kept as NAME.before-restore")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when not on a terminal)")
    p.add_argument("--dry-run", action="store_true", help="check the archive and say what would be done; change nothing")
    p.set_defaults(handler=run_restore)


def _opener_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--identity", "-i", metavar="FILE",
                        help="the age private key (AGE-SECRET-KEY-1…, or an OpenSSH key) an encrypted archive "
                             "was encrypted to")
    parser.add_argument("--passphrase-file", metavar="FILE",
                        help="a file holding the passphrase an encrypted archive was made with (default "
                             "backup.passphrase_file of server.yaml, when set)")


def _opener(args: argparse.Namespace) -> Any:
    """What opens an encrypted archive: the flags, else server.yaml's backup.passphrase_file when it can be read."""
    from llmgw.backup.seal import Opener

    if args.identity or args.passphrase_file:
        return Opener.from_files(args.identity, args.passphrase_file)
    config_path = getattr(args, "config", None)
    if config_path and os.path.exists(config_path):
        from llmgw.config import ConfigError, load_server_config

        try:
            passphrase_file = load_server_config(config_path).backup.passphrase_file
        except (ConfigError, OSError):
            passphrase_file = ""
        if passphrase_file:
            return Opener.from_files(passphrase_file=passphrase_file)
    return None


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

    if getattr(args, "backup_command", None) == "drill":
        return await run_drill(args)
    if getattr(args, "backup_command", None) == "keygen":
        return run_keygen(args)

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
    print("  checked  read back" + (" and decrypted" if result.encrypted else "")
          + "; every file matches its manifest")
    for where in result.copies:
        print(f"  copied   {where}")
    if result.removed:
        print(f"  removed  {', '.join(result.removed)} (backup.keep: {config.backup.keep})")
    if not result.encrypted:
        print("It is not encrypted and holds key and password hashes and private keys: set backup.encrypt_to "
              "(docs/backup.md), and keep copies off this machine.")
    elif not result.copies:
        print("Keep a copy off this machine (backup.copy_to).")
    return 0


async def run_drill(args: argparse.Namespace) -> int:
    from llmgw.backup import BackupError
    from llmgw.backup.drill import run_drill as drill

    try:
        report = await drill(args.archive, _opener(args), into=args.into)
    except BackupError as exc:
        return _fail("backup drill", f"{exc}; the drill failed", 2)
    if args.json:
        print_json(report.as_json())
        return 0 if report.ok else 1
    m = report.manifest
    print(f"Archive {report.archive}")
    print(f"  read whole: every file matches its manifest (made {m.created.isoformat()} by llmgw {m.llmgw_version})")
    where = "a scratch folder" if m.store_kind == "sqlite" else "the database of --into (drop it when done)"
    print(f"  restored into {where}; llmgw opened the store (schema version {m.schema_version} in the "
          f"archive, {report.schema_version} once opened)")
    if not report.counted:
        print("  the manifest has no row counts (made by an older llmgw): nothing to compare", file=sys.stderr)
        return 1
    width = max((len(t.table) for t in report.tables), default=5)
    for t in report.tables:
        found = "missing" if t.found is None else str(t.found)
        print(f"  {'ok  ' if t.ok else 'DIFF'} {t.table:<{width}}  {found:>8} rows, manifest {t.expected}")
    if report.ok:
        print(f"Drill passed: all {len(report.tables)} tables have the rows the manifest counted.")
        return 0
    names = ", ".join(t.table for t in report.mismatched)
    print(f"Drill FAILED: {len(report.mismatched)} table(s) differ from the manifest: {names}", file=sys.stderr)
    return 1


def run_keygen(args: argparse.Namespace) -> int:
    import datetime as dt

    import pyrage

    identity = pyrage.x25519.Identity.generate()
    recipient = str(identity.to_public())
    made = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = f"# made by llmgw server backup keygen at {made}\n# public key: {recipient}\n{identity}\n"
    try:
        fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _fail("backup keygen", f"{args.file} exists; it is never replaced (it may be the only key to "
                                      "your archives): give a new file")
    except OSError as exc:
        return _fail("backup keygen", f"cannot write {args.file}: {exc.strerror or exc}")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    print(recipient)
    print(f"The private key is in {args.file} (mode 0600). Put the line above in backup.encrypt_to, and keep "
          f"{args.file} somewhere other than the control plane: without it the archives cannot be read.",
          file=sys.stderr)
    return 0


async def run_restore(args: argparse.Namespace) -> int:
    from llmgw.backup import BackupError
    from llmgw.backup.restore import apply_restore, check_not_in_use, plan_restore

    try:
        plan = await plan_restore(args.archive, args.config, config_too=args.config_too, opener=_opener(args))
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
