"""Restoring a backup: check everything first, then replace the store (and, when asked, the configuration).

    plan = await plan_restore(archive, config_path, config_too=False)   # reads and checks; changes nothing
    await check_not_in_use(plan)                                         # BackupError while a server uses it
    done = await apply_restore(plan)                                     # lines saying what was done

Planning reads the whole archive and checks every file against the
manifest, and refuses a store from a newer schema than this llmgw knows, a
store of the other kind than server.yaml's, and an archive without
configuration when the configuration is asked for: a refusal changes
nothing. Applying writes each file under a temporary name beside its place
and renames it there, keeping what it replaces as `NAME.before-restore`.

A SQLite store is replaced as a file; a PostgreSQL one by `pg_restore
--clean --if-exists` in one transaction. Configuration files go back into
the folder of the server.yaml given, and files outside it only to the
paths the restored server.yaml names (never to a path only the archive says).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import os
import shutil
import socket
import sqlite3
import tempfile
from typing import Any

import attrs

from llmgw.backup.archive import (
    BackupError,
    Manifest,
    ManifestFile,
    fsync_dir,
    read_members,
    sha256_of,
    verify,
)
from llmgw.backup.make import named_files, sqlite_schema_version, store_location
from llmgw.config.server import ServerConfig

__all__ = ["RestorePlan", "apply_restore", "check_not_in_use", "plan_restore"]

BEFORE = ".before-restore"
#: The byte of a WAL database's -shm file every connection holds a shared lock on (SQLite's "DMS" lock).
SQLITE_SHM_DMS = 128


@attrs.frozen(kw_only=True)
class RestorePlan:
    """What a restore will do, worked out and checked before anything is changed."""

    archive: str
    manifest: Manifest
    config: ServerConfig  #: the server.yaml in force after the restore
    config_path: str
    store_kind: str
    store_where: str  #: the SQLite file, or the PostgreSQL address
    #: (file in the archive, where it goes) with --config-too; empty otherwise
    config_files: tuple[tuple[ManifestFile, str], ...] = ()
    #: files of the archive not put back, with why
    left_out: tuple[str, ...] = ()
    #: what opens an encrypted archive (--identity, --passphrase-file); None for one in clear
    opener: Any = attrs.field(default=None, eq=False, repr=False)

    def lines(self) -> list[str]:
        """The plan, for the operator to read before saying yes."""
        from llmgw.store.postgres import redact

        m = self.manifest
        made = m.created.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        out = [f"Archive {self.archive}",
               (f"  made {made} on {m.host or 'an unnamed host'} by llmgw {m.llmgw_version}; "
                f"{m.store_kind} store, schema version {m.schema_version}; every checksum matches")]
        if self.store_kind == "sqlite":
            kept = " (the file there now is kept as " + self.store_where + BEFORE + ")" \
                if os.path.exists(self.store_where) else ""
            out.append(f"The store {self.store_where} is replaced{kept}.")
        else:
            out.append(f"The store {redact(self.store_where)} is emptied of llmgw's tables and refilled "
                       "(pg_restore --clean, in one transaction).")
        if self.config_files:
            folder = os.path.dirname(self.config_path)
            out.append(f"{len(self.config_files)} configuration file(s) go back into {folder} and to the paths "
                       f"server.yaml names; a file that differs is kept as NAME{BEFORE}.")
        elif m.config_path:
            out.append("The configuration in the archive is left out (--config-too restores it).")
        out += [f"  not restored: {why}" for why in self.left_out]
        return out


def _known_version(kind: str) -> int:
    from llmgw.store.migrate import load_migrations

    return load_migrations(kind)[-1].version


def _refuse_newer(kind: str, version: int) -> None:
    from llmgw.store.errors import StoreTooNew

    known = _known_version(kind)
    if version > known:
        raise BackupError(f"the archive's store cannot be restored: {StoreTooNew(version, known)}")


async def plan_restore(archive: str, config_path: str, *, config_too: bool, opener: Any = None) -> RestorePlan:
    """Read and check the archive and work out the restore; BackupError (nothing changed) when it cannot be done.

    `opener` (llmgw.backup.seal.Opener) decrypts an encrypted archive."""
    archive = os.path.abspath(os.path.expanduser(archive))
    config_path = os.path.abspath(os.path.expanduser(config_path))
    manifest = await asyncio.to_thread(verify, archive, None, opener)
    _refuse_newer(manifest.store_kind, manifest.schema_version)
    if config_too:
        if not manifest.config_path:
            raise BackupError(f"{archive} holds no configuration (it was made without server.yaml's path); "
                              "restore without --config-too")
        config = await asyncio.to_thread(_archived_config, archive, manifest, config_path, opener)
    else:
        config = _load_config(config_path)
    kind, where = store_location(config)
    if kind != manifest.store_kind:
        raise BackupError(f"the archive holds a {manifest.store_kind} store, but store.dsn in {config_path} is "
                          f"{kind}; restore it into a store of the same kind")
    config_files: list[tuple[ManifestFile, str]] = []
    left_out: list[str] = []
    if config_too:
        folder = os.path.dirname(config_path)
        allowed = set(named_files(config))
        for f in manifest.files:
            if f.role == "config":
                config_files.append((f, os.path.join(folder, *f.name.split("/")[1:])))
            elif f.role == "file":
                dest = "/" + f.name.split("/", 1)[1]
                if dest in allowed:
                    config_files.append((f, dest))
                else:
                    left_out.append(f"{dest} (the restored server.yaml does not name it)")
    return RestorePlan(archive=archive, manifest=manifest, config=config, config_path=config_path,
                       store_kind=kind, store_where=where, config_files=tuple(config_files),
                       left_out=tuple(left_out), opener=opener)


def _load_config(config_path: str) -> ServerConfig:
    from llmgw.config import ConfigError, load_server_config

    try:
        return load_server_config(config_path)
    except ConfigError as exc:
        problems = "; ".join(p.located(config_path) for p in exc.details)
        raise BackupError(f"{config_path} cannot be used ({problems}); fix it, or take the archive's with "
                          "--config-too") from None
    except OSError as exc:
        raise BackupError(f"cannot read {config_path}: {exc.strerror or exc}; give --config, or take the "
                          "archive's with --config-too") from None


def _archived_config(archive: str, manifest: Manifest, config_path: str, opener: Any = None) -> ServerConfig:
    """The archive's server.yaml, read as if it were back in place (its relative file: paths among its files)."""
    from llmgw.config import ConfigError, parse_server_config
    from llmgw.config.load import parse_yaml_text

    name = "config/" + os.path.basename(manifest.config_path or "")
    entry = next((f for f in manifest.files if f.name == name), None)
    if entry is None:
        raise BackupError(f"{archive}: its manifest names {manifest.config_path} but the archive lacks {name}")
    small = [f for f in manifest.of_role("config") if f.size <= 1 << 20]  # a file: secret, certificates, keys
    contents = read_members(archive, list({f.name: f for f in [*small, entry]}.values()), opener)
    with tempfile.TemporaryDirectory(prefix=".llmgw-restore-") as scratch:
        for f in small:
            path = os.path.join(scratch, *f.name.split("/")[1:])
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(contents[f.name])
        text = contents[entry.name].decode("utf-8", errors="replace")
        try:
            return parse_server_config(parse_yaml_text(text, config_path), config_path, base_dir=scratch)
        except ConfigError as exc:
            problems = "; ".join(p.located(config_path) for p in exc.details)
            raise BackupError(f"the archive's server.yaml cannot be used here ({problems}); set what it "
                              "needs (its env: variables) and try again") from None


# ---------------------------------------------------------------- is a server using it?


async def check_not_in_use(plan: RestorePlan) -> None:
    """BackupError naming what uses the store: a server's admin port answering, a process with the SQLite
    file open, or other sessions on the PostgreSQL database."""
    answering = await asyncio.to_thread(_admin_answers, plan.config)
    if answering:
        raise BackupError(f"something answers on admin_listen ({answering}): a control plane is running; stop it "
                          "(systemctl stop llmgw-server) and restore again")
    if plan.store_kind == "sqlite":
        if sqlite_in_use(plan.store_where):
            raise BackupError(f"another process has the store {plan.store_where} open (a running llmgw server, "
                              "or an llmgw users/keys/org command); stop it and restore again")
    else:
        from llmgw.backup import pg

        others = await pg.other_sessions(plan.store_where)
        if others:
            raise BackupError(f"the store's database is in use ({', '.join(others[:5])}); stop every control "
                              "plane that uses it and restore again")


def _admin_answers(config: ServerConfig) -> str | None:
    from llmgw.config.validate import split_address

    if not config.admin_listen:
        return None
    try:
        host, port = split_address(config.admin_listen)
    except ValueError:
        return None
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return f"{host}:{port}"
    except OSError:
        return None


def sqlite_in_use(path: str) -> bool:
    """Whether another process has the SQLite store `path` (or its journal) open.

    llmgw's store keeps a rollback journal and holds no lock between transactions, so what tells is the
    open files of the machine's processes (/proc/PID/fd; as root, every process's). A store still in WAL
    mode (an earlier llmgw) also tells by the shared lock every connection holds on its -shm file. A process
    of this one does not count.
    """
    if _open_elsewhere([path, path + "-journal", path + "-wal"]):
        return True
    return _wal_shm_locked(path + "-shm")


def _open_elsewhere(paths: list[str]) -> bool:
    wanted = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        wanted.add((st.st_dev, st.st_ino))
    if not wanted or not os.path.isdir("/proc/self/fd"):
        return False
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or another user's process we may not look into
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in wanted:
                return True
    return False


def _wal_shm_locked(shm: str) -> bool:
    import fcntl

    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot even look: better to refuse than to pull the file from under a server
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SQLITE_SHM_DMS)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            raise
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SQLITE_SHM_DMS)
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------- doing it


async def apply_restore(plan: RestorePlan) -> list[str]:
    """Put the archive's store (and configuration files, when planned) in place; a line per thing done."""
    stage_parent = _stage_parent(plan)
    stage = tempfile.mkdtemp(prefix=".llmgw-restore-", dir=stage_parent)
    try:
        manifest = await asyncio.to_thread(verify, plan.archive, stage, plan.opener)
        if manifest != plan.manifest:
            raise BackupError(f"{plan.archive} changed while it was being restored; nothing was replaced")
        staged = os.path.join(stage, *manifest.store_file.name.split("/"))
        # The store first: a refusal there (a damaged copy, pg_restore failing in its one transaction)
        # leaves everything as it was.
        if plan.store_kind == "sqlite":
            await asyncio.to_thread(_check_sqlite_copy, staged)
            done = [await asyncio.to_thread(_put_sqlite, staged, plan.store_where)]
        else:
            from llmgw.backup import pg
            from llmgw.store.postgres import redact

            await pg.pg_restore(plan.store_where, staged)
            done = [f"store: {redact(plan.store_where)} restored with pg_restore"]
        if plan.config_files:
            changed = []
            for f, dest in plan.config_files:
                line = await asyncio.to_thread(_put_file, os.path.join(stage, *f.name.split("/")), dest, f)
                if line:
                    changed.append(line)
            done.append(f"configuration: {len(changed)} file(s) restored, "
                        f"{len(plan.config_files) - len(changed)} already as in the archive")
            done += changed
        return done
    finally:
        await asyncio.to_thread(shutil.rmtree, stage, True)


def _stage_parent(plan: RestorePlan) -> str:
    """Beside the SQLite file (so the copy is renamed into place), else beside the archive, else the temp folder."""
    if plan.store_kind == "sqlite":
        folder = os.path.dirname(plan.store_where)
        if not os.path.isdir(folder):
            try:
                os.makedirs(folder, mode=0o700)
            except OSError as exc:
                raise BackupError(f"cannot make the store's folder {folder}: {exc.strerror or exc}") from None
        return folder
    folder = os.path.dirname(plan.archive)
    return folder if os.access(folder, os.W_OK | os.X_OK) else tempfile.gettempdir()


def _check_sqlite_copy(path: str) -> None:
    from llmgw.store.errors import StoreTooNew
    from llmgw.store.migrate import load_migrations, pending

    try:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()
            version = sqlite_schema_version(conn)
            applied = {int(r[0]): r[1] for r in conn.execute("SELECT version, name FROM schema_migrations")} \
                if version else {}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BackupError(f"the archive's store is not a database SQLite can read: {exc}") from None
    if check is None or check[0] != "ok":
        raise BackupError(f"the archive's store fails SQLite's check ({check and check[0]}); nothing was replaced")
    try:
        pending(applied, load_migrations("sqlite"))
    except StoreTooNew as exc:  # the same refusal the server gives
        raise BackupError(f"the archive's store cannot be restored: {exc}") from None


def _free_name(path: str) -> str:
    if not os.path.lexists(path):
        return path
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = f"{path}-{stamp}" + ("" if n == 1 else f"-{n}")
        if not os.path.lexists(candidate):
            return candidate
    raise BackupError(f"{path}: too many earlier copies beside it; remove some")


def _keep_old(path: str) -> str:
    """Keep the file at `path` as PATH.before-restore (or a name not taken); the name used."""
    kept = _free_name(path + BEFORE)
    try:
        os.link(path, kept)
    except OSError:
        shutil.copy2(path, kept)
    return kept


def _own_like(path: str, like: str) -> None:
    if os.geteuid() != 0:
        return
    try:
        st = os.stat(like)
        os.chown(path, st.st_uid, st.st_gid)
    except OSError:
        pass


def _put_sqlite(staged: str, target: str) -> str:
    folder = os.path.dirname(target)
    kept = None
    if os.path.exists(target):
        _settle_wal(target)
        kept = _keep_old(target)
    os.chmod(staged, 0o600)
    _own_like(staged, target if os.path.exists(target) else folder)
    with open(staged, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(staged, target)
    fsync_dir(folder)
    return f"store: {target} restored" + (f"; the one it replaced is {kept}" if kept else "")


def _settle_wal(target: str) -> None:
    """Write the old file's journal into it and take the journal away, so none is left to meet the new file."""
    try:
        conn = sqlite3.connect(target, isolation_level=None, timeout=5)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        pass
    wal = target + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        os.replace(wal, _free_name(target + BEFORE + "-wal"))
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            os.remove(target + suffix)
        except FileNotFoundError:
            pass


def _put_file(staged: str, dest: str, f: ManifestFile) -> str | None:
    """One configuration file back at `dest`; None when it already is as in the archive."""
    if os.path.isfile(dest):
        digest, _ = sha256_of(dest)
        if digest == f.sha256:
            return None
    folder = os.path.dirname(dest)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".llmgw-restore-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, open(staged, "rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, f.mode & 0o777)
        _own_like(tmp, dest if os.path.exists(dest) else folder)
        kept = _keep_old(dest) if os.path.lexists(dest) else None
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)
    return f"  {dest}" + (f" (the one it replaced is {kept})" if kept else "")


def summary(plan: RestorePlan) -> dict[str, Any]:
    """The plan as JSON, for --json."""
    return {"archive": plan.archive, "manifest": plan.manifest.as_json(), "store": plan.store_kind,
            "config_files": [dest for _, dest in plan.config_files], "left_out": list(plan.left_out)}
