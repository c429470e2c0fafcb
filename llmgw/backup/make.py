"""Making a backup: the store and the configuration into one archive, with the server running or not.

    result = await make_backup(config, config_path="/etc/llmgw/server.yaml")

From the command line the store is read from server.yaml's address; from a
running server (the admin API) the open store is passed, so the file it
really uses is the one copied. Blocking work (SQLite's backup, reading and
compressing files) runs in a thread; pg_dump is a child process: the event
loop is never held up.

Each archive is encrypted when server.yaml says so (backup.encrypt_to or
backup.passphrase_file, llmgw.backup.seal), read back and checked against
its manifest right after it is written (an archive that does not read back
is removed and the backup fails), then copied to each of backup.copy_to
(llmgw.backup.copies). Older archives beyond backup.keep are removed here
and at each destination.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import shutil
import socket
import sqlite3
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from llmgw.backup.archive import (
    BackupError,
    Manifest,
    ManifestFile,
    prune,
    sha256_of,
    write_archive,
)
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig

__all__ = ["BackupResult", "backup_dir", "make_backup", "store_location"]

#: Where archives go with a PostgreSQL store and no backup.dir.
DEFAULT_DIR = "/var/lib/llmgw/backups"
#: A configuration folder holding more than this is not llmgw's own (server.yaml kept in /etc itself?).
MAX_CONFIG_FILES = 1000
MAX_CONFIG_BYTES = 256 << 20
BUSY_TIMEOUT_S = 30.0
SQLITE_NAME = "store/llmgw.db"
PG_NAME = "store/llmgw.dump"


@attrs.frozen(kw_only=True)
class BackupResult:
    """An archive just made."""

    path: str
    size: int
    sha256: str
    manifest: Manifest
    removed: tuple[str, ...] = ()  #: older archives removed to keep backup.keep
    encrypted: bool = False
    copies: tuple[str, ...] = ()  #: where it was copied (backup.copy_to), each checked by its sha256

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def config_files(self) -> int:
        return sum(1 for f in self.manifest.files if f.role != "store")


def store_location(config: ServerConfig, store: Any = None) -> tuple[str, str]:
    """("sqlite", its file) or ("postgres", its address): the open `store` when given, else server.yaml's."""
    from llmgw.store import parse_dsn
    from llmgw.store.errors import StoreError

    if store is not None and store.dialect == "sqlite":
        path = getattr(store, "path", None)
        if path is None:
            raise BackupError("the store is in memory; there is nothing on disk to back up")
        return "sqlite", _clean(path)
    try:
        kind, where = parse_dsn(config.store.dsn.reveal())
    except StoreError as exc:
        raise BackupError(f"store.dsn: {exc}") from None
    if store is not None and kind != store.dialect:
        raise BackupError(f"the store in use is {store.dialect}, but server.yaml's store.dsn is {kind}")
    if where is None:
        raise BackupError("store.dsn is sqlite::memory:; there is nothing on disk to back up")
    return kind, (_clean(where) if kind == "sqlite" else where)


def _clean(path: str) -> str:
    """An absolute path with one leading slash (sqlite:////abs/path leaves two, which POSIX reads as one)."""
    path = os.path.abspath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def backup_dir(config: ServerConfig, kind: str, where: str) -> str:
    """backup.dir, or its default: `backups` beside a SQLite store's file, /var/lib/llmgw/backups otherwise."""
    if config.backup.dir:
        return os.path.abspath(os.path.expanduser(config.backup.dir))
    if kind == "sqlite":
        return os.path.join(os.path.dirname(where), "backups")
    return DEFAULT_DIR


async def make_backup(
    config: ServerConfig,
    *,
    config_path: str | None = None,
    store: Any = None,
    to_dir: str | None = None,
    keep: int | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    copy: bool = True,
) -> BackupResult:
    """Back up the store and the configuration folder into one archive; see the module's doc.

    `config_path`: server.yaml, whose folder goes into the archive (None:
    the store only). `store`: the store a running server has open. `to_dir`:
    another folder than backup.dir. `keep`: archives kept there (default
    backup.keep). `copy`: copy it to backup.copy_to (not with `to_dir`).
    BackupError says what stopped it; nothing is left behind, except an
    archive that was written and checked but could not be copied everywhere
    (the error names the destination).
    """
    from llmgw.backup.seal import Sealer

    sealer = Sealer.from_config(config)
    kind, where = store_location(config, store)
    folder = os.path.abspath(os.path.expanduser(to_dir)) if to_dir else backup_dir(config, kind, where)
    created = (clock or (lambda: dt.datetime.now(dt.UTC)))().astimezone(dt.UTC).replace(microsecond=0)
    _make_folder(folder)
    try:
        result = await _make(config, config_path, store, folder, kind, where, created, keep, sealer)
    except OSError as exc:  # a disk full, a file that went away: said, not a traceback
        where_ = f" ({exc.filename})" if exc.filename else ""
        raise BackupError(f"the backup could not be written: {exc.strerror or exc}{where_}") from None
    if copy and not to_dir and config.backup.copy_to:
        from llmgw.backup.copies import copy_everywhere

        copies = await copy_everywhere(config, result.path, config.backup.keep if keep is None else keep)
        result = attrs.evolve(result, copies=tuple(copies))
    return result


async def _make(config: ServerConfig, config_path: str | None, store: Any, folder: str, kind: str, where: str,
                created: dt.datetime, keep: int | None, sealer: Any) -> BackupResult:
    from llmgw.buildinfo import build_info

    stage = tempfile.mkdtemp(prefix=".llmgw-backup-stage-", dir=folder)
    try:
        staged: dict[str, str] = {}
        files: list[ManifestFile] = []
        if kind == "sqlite":
            copy = os.path.join(stage, "llmgw.db")
            version = await asyncio.to_thread(copy_sqlite, where, copy)
            counts: dict[str, int] | None = await asyncio.to_thread(count_rows, copy)
            staged[SQLITE_NAME] = copy
            files.append(await asyncio.to_thread(_describe, SQLITE_NAME, copy, "store", where, 0o600))
            source = where
        else:
            from llmgw.backup import pg
            from llmgw.store.postgres import redact

            dump = os.path.join(stage, "llmgw.dump")
            version = store.schema_version if store is not None else await pg.schema_version(where)
            counts = await pg.pg_dump_counted(where, dump)
            staged[PG_NAME] = dump
            files.append(await asyncio.to_thread(_describe, PG_NAME, dump, "store", "", 0o600))
            source = redact(where)
        config_abs = os.path.abspath(config_path) if config_path else None
        if config_abs is not None:
            extra = await asyncio.to_thread(_stage_config, config, config_abs, stage, folder,
                                            where if kind == "sqlite" else None)
            for f, path in extra:
                files.append(f)
                staged[f.name] = path
        manifest = Manifest(llmgw_version=build_info()["version"], created=created, host=socket.gethostname(),
                            store_kind=kind, schema_version=version, store_source=source, config_path=config_abs,
                            files=tuple(files), counts=counts)
        path, size, digest, opener = await asyncio.to_thread(write_archive, folder, manifest, staged, sealer)
        _own_like_folder(folder, path, path + ".sha256")
        await asyncio.to_thread(_check_written, path, manifest, opener)
        removed = await asyncio.to_thread(prune, folder, config.backup.keep if keep is None else keep,
                                          spare=os.path.basename(path))
    finally:
        await asyncio.to_thread(shutil.rmtree, stage, True)
    return BackupResult(path=path, size=size, sha256=digest, manifest=manifest, removed=tuple(removed),
                        encrypted=sealer is not None)


def _check_written(path: str, manifest: Manifest, opener: Any) -> None:
    """Read the archive just written back (decrypting it) and check it against its manifest; remove it if not."""
    from llmgw.backup.archive import verify

    try:
        read = verify(path, opener=opener)
        if read != manifest:
            raise BackupError("its manifest reads back differently")
    except BackupError as exc:
        for p in (path, path + ".sha256"):
            with contextlib.suppress(OSError):
                os.remove(p)
        raise BackupError(f"the archive just written did not read back whole ({exc}); it was removed. Check the "
                          "disk of the backup folder") from None


def _make_folder(folder: str) -> None:
    if os.path.isdir(folder):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise BackupError(f"cannot write to the backup folder {folder}; run as its owner (sudo), or give "
                              "another with --to or backup.dir")
        return
    parent = os.path.dirname(folder)
    if not os.path.isdir(parent):
        raise BackupError(f"the backup folder {folder} cannot be made: {parent} does not exist; create it, or "
                          "give another folder with --to or backup.dir")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        if os.path.isdir(folder):
            return
        raise BackupError(f"{folder} is a file, not a folder; give backup.dir (or --to) a folder") from None
    except OSError as exc:
        raise BackupError(f"cannot make the backup folder {folder}: {exc.strerror or exc}") from None
    _own_like_folder(parent, folder)


def _own_like_folder(folder: str, *paths: str) -> None:
    """As root, give what was made the owner of the folder it is in, so the server (not root) can use it too."""
    if os.geteuid() != 0:
        return
    try:
        st = os.stat(folder)
        for path in paths:
            os.chown(path, st.st_uid, st.st_gid)
    except OSError:
        pass


# ---------------------------------------------------------------- the store


def copy_sqlite(source: str, dest: str) -> int:
    """A consistent copy of the SQLite file `source` at `dest` while others write to it; its schema version.

    SQLite's online backup in one step reads one snapshot, whatever is
    written meanwhile. The copy is made a single file (rollback journal),
    checked, and left mode 0600.
    """
    if not os.path.isfile(source):
        raise BackupError(f"there is no SQLite store at {source} (store.dsn); nothing to back up")
    uri = "file:" + urllib.request.pathname2url(source) + "?mode=rw"
    try:
        src = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open the store {source}: {exc}") from None
    try:
        os.close(os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        dst = sqlite3.connect(dest, isolation_level=None)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode = DELETE")
            version = sqlite_schema_version(dst)
            check = dst.execute("PRAGMA quick_check").fetchone()
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise BackupError(f"the store {source} could not be copied: {exc}") from None
    finally:
        src.close()
    if check is None or check[0] != "ok":
        raise BackupError(f"the copy of {source} fails SQLite's check ({check and check[0]}); the store itself "
                          "may be damaged: run `sqlite3 FILE 'PRAGMA integrity_check'`")
    return version


def count_rows(path: str) -> dict[str, int]:
    """Rows in each table of the SQLite file `path` (its own tables, not SQLite's nor the schema's history)."""
    conn = sqlite3.connect(f"file:{urllib.request.pathname2url(path)}?mode=ro", uri=True, isolation_level=None)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name != 'schema_migrations' ORDER BY name")]
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}
    finally:
        conn.close()


def sqlite_schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    if row.fetchone() is None:
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])


# ---------------------------------------------------------------- the configuration


def _describe(name: str, path: str, role: str, source: str, mode: int) -> ManifestFile:
    digest, size = sha256_of(path)
    return ManifestFile(name=name, size=size, sha256=digest, mode=mode, role=role, source=source)


def named_files(config: ServerConfig) -> list[str]:
    """Files server.yaml names that a restored machine needs: the admin token, certificates, file: secrets."""
    paths = [config.admin_token_file, config.agent_tls.cert, config.agent_tls.key, config.agent_tls.ca]
    paths += [s.origin[5:] for s in _secrets(config) if s.origin.startswith("file:")]
    return list(dict.fromkeys(os.path.abspath(p) for p in paths if p))


def _secrets(obj: Any) -> Iterator[Secret]:
    if isinstance(obj, Secret):
        yield obj
    elif attrs.has(type(obj)):
        for f in attrs.fields(type(obj)):
            yield from _secrets(getattr(obj, f.name))
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _secrets(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _secrets(item)


def _skipped(path: str, backup_folder: str, store_file: str | None) -> bool:
    """What the configuration folder may hold that is not configuration: archives, the store and its journals."""
    if path == backup_folder or path.startswith(backup_folder + os.sep):
        return True
    if store_file is not None and (path == store_file or path.startswith((store_file + "-",
                                                                          store_file + ".before-restore"))):
        return True
    base = os.path.basename(path)
    return base.startswith((".llmgw-backup-", ".llmgw-restore-"))


def config_sources(config: ServerConfig, config_path: str, backup_folder: str,
                   store_file: str | None) -> list[tuple[str, str, str]]:
    """(name in the archive, role, path on disk) of every configuration file to keep."""
    folder = os.path.dirname(config_path)
    found: list[tuple[str, str, str]] = []
    for root, dirs, names in os.walk(folder, onerror=_walk_error):
        dirs[:] = sorted(d for d in dirs if not _skipped(os.path.join(root, d), backup_folder, store_file)
                         and not os.path.islink(os.path.join(root, d)))
        for name in sorted(names):
            path = os.path.join(root, name)
            if _skipped(path, backup_folder, store_file) or not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            found.append((f"config/{rel}", "config", path))
            if len(found) > MAX_CONFIG_FILES:
                raise BackupError(f"{folder} holds more than {MAX_CONFIG_FILES} files: is it llmgw's own? Keep "
                                  "server.yaml in a folder of its own (like /etc/llmgw)")
    if not any(p == config_path for _, _, p in found):
        raise BackupError(f"{config_path}: not found in its folder; give --config the server.yaml in use")
    for path in named_files(config):
        if path.startswith(folder + os.sep) or not os.path.isfile(path):
            continue  # in the folder already, or not made yet (no token before the first start)
        if _skipped(path, backup_folder, store_file):
            continue
        found.append((f"files{path}" if path.startswith("/") else f"files/{path}", "file", path))
    return found


def _walk_error(exc: OSError) -> None:
    raise BackupError(f"cannot read {exc.filename}: {exc.strerror}; run as a user who can (sudo)")


def _stage_config(config: ServerConfig, config_path: str, stage: str, backup_folder: str,
                  store_file: str | None) -> list[tuple[ManifestFile, str]]:
    """Copy the configuration files into `stage` (so what is hashed is what is archived) and describe them."""
    out = []
    total = 0
    for index, (name, role, path) in enumerate(config_sources(config, config_path, backup_folder, store_file)):
        copy = os.path.join(stage, f"config-{index:05d}")
        try:
            mode = os.stat(path).st_mode & 0o7777
            shutil.copyfile(path, copy)
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror or exc}; run as a user who can (sudo)") from None
        f = _describe(name, copy, role, path, mode)
        total += f.size
        if total > MAX_CONFIG_BYTES:
            raise BackupError(f"the configuration in {os.path.dirname(config_path)} is larger than "
                              f"{MAX_CONFIG_BYTES >> 20} MiB: is the folder llmgw's own?")
        out.append((f, copy))
    return out
