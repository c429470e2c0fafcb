"""The backup archive: its name, its manifest, writing it safely, reading it back only when it is whole.

An archive is one gzip-compressed tar file, `llmgw-backup-YYYYmmddTHHMMSSZ.tar.gz`
(a `-2`, `-3` … before `.tar.gz` when two are made in the same second), or
that file encrypted with age, `….tar.gz.age` (llmgw.backup.seal):

    manifest.json            what is in it: llmgw's version, when, the store's kind and
                             schema version, and each file with its size, sha256 and mode
    store/llmgw.db           SQLite: a consistent copy made with the online backup API
    store/llmgw.dump         PostgreSQL: `pg_dump --format=custom`
    config/…                 the folder server.yaml is in, as it was
    files/…                  files server.yaml names outside that folder (the admin token,
                             certificates, file: secrets), under their absolute paths

The manifest also counts the rows of each table of a SQLite store's copy,
which the restore drill (llmgw.backup.drill) checks a restored store against.

It is written under a temporary name, flushed to disk and renamed, mode 0600
(it holds key and password hashes and private keys), with its sha256 in
`NAME.sha256` beside it in `sha256sum` form. Reading checks every member
against the manifest before anything is used: a damaged or altered archive
is refused as a whole.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

import attrs

from llmgw.compat import fromisoformat
from llmgw.durable import fsync_dir

if TYPE_CHECKING:
    from llmgw.backup.seal import Opener, Sealer

__all__ = [
    "FORMAT",
    "MANIFEST",
    "ArchiveDamaged",
    "ArchiveEntry",
    "BackupError",
    "Manifest",
    "ManifestFile",
    "archive_name",
    "fsync_dir",
    "list_archives",
    "prune",
    "is_archive_name",
    "read_member",
    "read_members",
    "sha256_of",
    "verify",
    "write_archive",
]

FORMAT = 1
MANIFEST = "manifest.json"
PREFIX = "llmgw-backup-"
SUFFIX = ".tar.gz"
SEALED_SUFFIX = ".tar.gz.age"
_NAME = re.compile(r"llmgw-backup-(\d{8}T\d{6}Z)(?:-(\d+))?\.tar\.gz(\.age)?")
_TIME = "%Y%m%dT%H%M%SZ"
_ROLES = ("store", "config", "file")
_CHUNK = 1 << 20


class BackupError(Exception):
    """A backup or a restore that cannot be done; the message says why and what to do."""


class ArchiveDamaged(BackupError):
    """The archive is not what its manifest says (or has none): nothing is taken from it."""


@attrs.frozen(kw_only=True)
class ManifestFile:
    """One file in the archive."""

    name: str  #: its path in the archive: store/llmgw.db, config/tls/ca.pem, files/var/lib/llmgw/admin-token
    size: int
    sha256: str
    mode: int  #: permission bits it had (0o600)
    role: str  #: store, config or file
    source: str = ""  #: where it came from: an absolute path (config, file) or the store's file

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "size": self.size, "sha256": self.sha256,
                "mode": f"{self.mode:04o}", "source": self.source}


@attrs.frozen(kw_only=True)
class Manifest:
    """What an archive holds; `manifest.json` in it."""

    llmgw_version: str
    created: dt.datetime
    host: str
    store_kind: str  #: sqlite or postgres
    schema_version: int
    store_source: str  #: the SQLite file, or the PostgreSQL address with its password hidden
    config_path: str | None  #: server.yaml's path when the configuration is in the archive
    files: tuple[ManifestFile, ...]
    #: rows in each table of the store's copy (SQLite); None when not counted (PostgreSQL, an older llmgw)
    counts: dict[str, int] | None = None
    format: int = FORMAT

    @property
    def config_dir(self) -> str | None:
        return os.path.dirname(self.config_path) if self.config_path else None

    @property
    def store_file(self) -> ManifestFile:
        return next(f for f in self.files if f.role == "store")

    def of_role(self, role: str) -> list[ManifestFile]:
        return [f for f in self.files if f.role == role]

    def as_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "llmgw_version": self.llmgw_version,
            "created": self.created.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
            "host": self.host,
            "store": {"kind": self.store_kind, "schema_version": self.schema_version, "source": self.store_source},
            "config": {"path": self.config_path} if self.config_path else None,
            "files": [f.as_json() for f in self.files],
            **({"counts": dict(self.counts)} if self.counts is not None else {}),
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """The manifest read back; ArchiveDamaged when it is not one this llmgw can read."""
        try:
            data = json.loads(raw.decode("utf-8"))
            if data.get("format") != FORMAT:
                raise ArchiveDamaged(f"manifest.json: format {data.get('format')!r}; this llmgw reads format "
                                     f"{FORMAT} (was the archive made by a newer llmgw?)")
            store = data["store"]
            config = data.get("config") or {}
            files = tuple(
                ManifestFile(name=str(f["name"]), size=int(f["size"]), sha256=str(f["sha256"]).lower(),
                             mode=int(str(f["mode"]), 8), role=str(f["role"]), source=str(f.get("source", "")))
                for f in data["files"]
            )
            counts = data.get("counts")
            if counts is not None:
                counts = {str(table): int(rows) for table, rows in dict(counts).items()}
            manifest = cls(llmgw_version=str(data["llmgw_version"]), created=_parse_time(data["created"]),
                           host=str(data.get("host", "")), store_kind=str(store["kind"]),
                           schema_version=int(store["schema_version"]), store_source=str(store.get("source", "")),
                           config_path=config.get("path") or None, files=files, counts=counts)
        except ArchiveDamaged:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ArchiveDamaged(f"manifest.json cannot be read ({type(exc).__name__}: {exc})") from None
        manifest.check()
        return manifest

    def check(self) -> None:
        """Refuse a manifest that names a file twice, a path that escapes, or no store."""
        seen: set[str] = set()
        for f in self.files:
            if f.name in seen:
                raise ArchiveDamaged(f"manifest.json names {f.name} twice")
            seen.add(f.name)
            if f.role not in _ROLES or not _safe_name(f.name, f.role):
                raise ArchiveDamaged(f"manifest.json: {f.name!r} is not a path this llmgw writes ({f.role})")
            if not re.fullmatch(r"[0-9a-f]{64}", f.sha256) or f.size < 0:
                raise ArchiveDamaged(f"manifest.json: {f.name} has no valid size and sha256")
        if self.store_kind not in ("sqlite", "postgres"):
            raise ArchiveDamaged(f"manifest.json: unknown store kind {self.store_kind!r}")
        if len(self.of_role("store")) != 1:
            raise ArchiveDamaged("manifest.json: the archive must hold exactly one store file")


def _parse_time(text: str) -> dt.datetime:
    t = fromisoformat(str(text))  # Python 3.11 reads a final Z
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _safe_name(name: str, role: str) -> bool:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "" in path.parts or str(path) != name:
        return False
    top = {"store": "store", "config": "config", "file": "files"}[role]
    return len(path.parts) >= 2 and path.parts[0] == top


# ---------------------------------------------------------------- names and the folder


def archive_name(created: dt.datetime, n: int = 1, *, sealed: bool = False) -> str:
    stamp = created.astimezone(dt.UTC).strftime(_TIME)
    return f"{PREFIX}{stamp}{'' if n <= 1 else f'-{n}'}{SEALED_SUFFIX if sealed else SUFFIX}"


def is_archive_name(name: str) -> bool:
    """Whether `name` is one llmgw gives its archives (clear or encrypted)."""
    return _name_key(name) is not None


def _name_key(name: str) -> tuple[str, int] | None:
    m = _NAME.fullmatch(name)
    return None if m is None else (m.group(1), int(m.group(2) or 1))


@attrs.frozen(kw_only=True)
class ArchiveEntry:
    """An archive found in a backup folder."""

    name: str
    path: str
    size: int
    created: dt.datetime
    sha256: str | None  #: from NAME.sha256 beside it; None when that is missing or unreadable

    @property
    def encrypted(self) -> bool:
        return self.name.endswith(".age")


def list_archives(folder: str) -> list[ArchiveEntry]:
    """The archives in `folder` named as llmgw names them, newest first (none when it does not exist)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BackupError(f"cannot read the backup folder {folder}: {exc.strerror or exc}") from None
    found = []
    for name in names:
        key = _name_key(name)
        if key is None:
            continue
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        created = dt.datetime.strptime(key[0], _TIME).replace(tzinfo=dt.UTC)
        found.append((key, ArchiveEntry(name=name, path=path, size=st.st_size, created=created,
                                        sha256=_read_sidecar(path))))
    return [entry for _, entry in sorted(found, key=lambda kv: kv[0], reverse=True)]


def _read_sidecar(path: str) -> str | None:
    try:
        text = Path(path + ".sha256").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    digest = text.split()[0].lower() if text.split() else ""
    return digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None


def prune(folder: str, keep: int, *, spare: str | None = None) -> list[str]:
    """Remove the oldest archives of `folder` beyond the newest `keep` (0 keeps all); never `spare`.

    Returns the names removed. Only files named as llmgw names its archives
    are touched, with their `.sha256`.
    """
    if keep <= 0:
        return []
    removed = []
    for entry in list_archives(folder)[keep:]:
        if entry.name == spare:
            continue
        for path in (entry.path, entry.path + ".sha256"):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise BackupError(f"cannot remove the old archive {path}: {exc.strerror or exc}") from None
        removed.append(entry.name)
    return removed


# ---------------------------------------------------------------- writing


def sha256_of(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(hex sha256, size) of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class _HashingWriter(io.RawIOBase):
    """A file that hashes and counts what is written through it (for tarfile's stream mode)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._f.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)


def write_archive(folder: str, manifest: Manifest, staged: dict[str, str],
                  sealer: Sealer | None = None) -> tuple[str, int, str, Opener | None]:
    """Write the archive of `manifest` into `folder`; `staged` maps each file's name to where it is on disk.

    Returns (path, size, sha256, what opens it: None when it is in clear).
    With `sealer` the tar.gz is encrypted on its way to the disk. The
    archive appears under its final name only once complete and on disk; a
    failure leaves nothing behind.
    """
    fd, tmp = tempfile.mkstemp(prefix=".llmgw-backup-", suffix=".partial", dir=folder)
    opener = None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as raw:
            writer = _HashingWriter(raw)
            if sealer is None:
                _write_tar_gz(writer, manifest, staged)
            else:
                with sealer.writer(writer) as (plain, opener):
                    _write_tar_gz(plain, manifest, staged)
            raw.flush()
            os.fsync(raw.fileno())
        digest = writer.digest.hexdigest()
        final = _place(folder, tmp, manifest.created, sealed=sealer is not None)
    except BaseException:
        _remove_quietly(tmp)
        raise
    name = os.path.basename(final)
    _write_private(final + ".sha256", f"{digest}  {name}\n".encode())
    fsync_dir(folder)
    return final, writer.size, digest, opener


def _write_tar_gz(out: IO[bytes], manifest: Manifest, staged: dict[str, str]) -> None:
    # gzip by hand: tarfile's stream mode takes no compression level before Python 3.12.
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=int(manifest.created.timestamp())) \
            as gz, tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        manifest_bytes = manifest.to_bytes()
        tar.addfile(_member(MANIFEST, len(manifest_bytes), manifest.created), io.BytesIO(manifest_bytes))
        for f in manifest.files:
            with open(staged[f.name], "rb") as src:
                tar.addfile(_member(f.name, f.size, manifest.created), src)


def _member(name: str, size: int, when: dt.datetime) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = int(when.timestamp())
    info.uname = info.gname = ""
    return info


def _place(folder: str, tmp: str, created: dt.datetime, *, sealed: bool = False) -> str:
    """Give the finished archive its name, never replacing another (a link fails where the name is taken)."""
    for n in range(1, 1000):
        final = os.path.join(folder, archive_name(created, n, sealed=sealed))
        try:
            os.link(tmp, final)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links
            if os.path.exists(final):
                continue
            os.replace(tmp, final)
            return final
        os.remove(tmp)
        return final
    raise BackupError(f"{folder}: a thousand archives made in one second; something is wrong")


def _write_private(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".llmgw-", dir=os.path.dirname(path))
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


# ---------------------------------------------------------------- reading


def verify(path: str, extract_to: str | None = None, opener: Opener | None = None) -> Manifest:
    """Read the archive at `path`, checking every file against its manifest; its manifest when whole.

    An encrypted archive is decrypted on the way with `opener` (BackupError
    without one). With `extract_to` (an empty folder), each file is also written there
    under its name in the archive; what was written is left for the caller
    to remove when this raises. ArchiveDamaged for anything that does not
    match: a missing or extra member, a size or checksum that differs, a
    truncated or corrupt file.
    """
    from llmgw.backup.seal import open_plain

    try:
        with open_plain(path, opener) as plain, tarfile.open(fileobj=plain, mode="r|gz") as tar:
            members = iter(tar)
            first = next(members, None)
            if first is None or first.name != MANIFEST or not first.isfile():
                raise ArchiveDamaged(f"{path}: does not begin with {MANIFEST}; not an llmgw backup archive")
            manifest = Manifest.from_bytes(_read_all(tar, first, 1 << 20))
            expected = {f.name: f for f in manifest.files}
            seen: set[str] = set()
            for member in members:
                f = expected.get(member.name)
                if f is None or not member.isfile() or member.name in seen:
                    raise ArchiveDamaged(f"{path}: holds {member.name!r}, which its manifest does not list")
                seen.add(member.name)
                _check_member(tar, member, f, extract_to)
            missing = sorted(set(expected) - seen)
            if missing:
                raise ArchiveDamaged(f"{path}: {', '.join(missing)} listed in the manifest but missing")
            return manifest
    except ArchiveDamaged as exc:
        message = str(exc)
        raise ArchiveDamaged(message if message.startswith(f"{path}: ") else f"{path}: {message}") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise BackupError(f"{path}: no such file") from None
        if isinstance(exc, PermissionError):
            raise BackupError(f"{path}: cannot be read ({exc.strerror}); run as a user who can (sudo)") from None
        raise ArchiveDamaged(f"{path}: damaged or not a gzip tar archive ({type(exc).__name__}: {exc})") from None


def _read_all(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    if member.size > limit:
        raise ArchiveDamaged(f"{member.name}: {member.size} bytes, more than a manifest can be")
    f = tar.extractfile(member)
    assert f is not None
    return f.read()


def _check_member(tar: tarfile.TarFile, member: tarfile.TarInfo, expected: ManifestFile,
                  extract_to: str | None) -> None:
    if member.size != expected.size:
        raise ArchiveDamaged(f"{member.name}: {member.size} bytes in the archive, {expected.size} in its manifest")
    src = tar.extractfile(member)
    assert src is not None
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        out = None
        if extract_to is not None:
            target = os.path.join(extract_to, *PurePosixPath(member.name).parts)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            out = stack.enter_context(os.fdopen(fd, "wb"))
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    if digest.hexdigest() != expected.sha256:
        raise ArchiveDamaged(f"{member.name}: its sha256 is not the one in the manifest; the archive is damaged")


def read_members(path: str, expected: list[ManifestFile], opener: Opener | None = None) -> dict[str, bytes]:
    """Small files of an archive, like its server.yaml, by name, each checked against the manifest again."""
    from llmgw.backup.seal import open_plain

    wanted = {f.name: f for f in expected}
    found: dict[str, bytes] = {}
    try:
        with open_plain(path, opener) as plain, tarfile.open(fileobj=plain, mode="r|gz") as tar:
            for member in tar:
                f = wanted.get(member.name)
                if f is None:
                    continue
                data = _read_all(tar, member, 64 << 20)
                if hashlib.sha256(data).hexdigest() != f.sha256:
                    raise ArchiveDamaged(f"{f.name}: its sha256 is not the one in the manifest; the archive is "
                                         "damaged")
                found[f.name] = data
                if len(found) == len(wanted):
                    break
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveDamaged(f"{path}: cannot be read ({exc})") from None
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise ArchiveDamaged(f"{path}: {', '.join(missing)} cannot be found in it")
    return found


def read_member(path: str, expected: ManifestFile, opener: Opener | None = None) -> bytes:
    """One small file of an archive, checked against the manifest again."""
    return read_members(path, [expected], opener)[expected.name]

