"""What the backup endpoints answer: an archive just made, and the archives kept."""

from __future__ import annotations

import datetime as dt

import attrs

from llmgw.admin.fields import field


@attrs.frozen(kw_only=True)
class BackupMade:
    """The answer of POST /backups: the archive just written on this control plane."""

    path: str = field("Where the archive is, on the control plane's disk.")
    name: str = field("Its file name, like llmgw-backup-20260901T140300Z.tar.gz.")
    size: int = field("Its size in bytes.")
    sha256: str = field("Its sha256, also written beside it as NAME.sha256.")
    created: dt.datetime = field("When it was made.")
    store: str = field("The store's kind: sqlite (a copy of the file) or postgres (a pg_dump).")
    schema_version: int = field("The store's schema version; a restore needs an llmgw that knows it.")
    config_dir: str | None = field(
        "The folder of server.yaml whose files are in the archive; null when the server was not started from a "
        "file, so only the store is in it.", None)
    config_files: int = field("How many configuration files are in it (server.yaml, certificates, the token).")
    removed: list[str] = field("Older archives removed to keep backup.keep of them.", factory=list)
    encrypted: bool = field("Whether it is encrypted with age (backup.encrypt_to or backup.passphrase_file); it was "
                            "read back and checked against its manifest either way.", False)
    copies: list[str] = field("Where it was copied and checked (backup.copy_to).", factory=list)


@attrs.frozen(kw_only=True)
class BackupArchive:
    """An archive in the backup folder."""

    name: str = field("Its file name.")
    path: str = field("Where it is, on the control plane's disk.")
    size: int = field("Its size in bytes.")
    created: dt.datetime = field("When it was made (from its name).")
    sha256: str | None = field("Its sha256 from NAME.sha256 beside it; null when that file is missing.", None)
    encrypted: bool = field("Whether it is encrypted with age (its name ends in .tar.gz.age).", False)


@attrs.frozen(kw_only=True)
class ScheduledRun:
    """The last backup backup.schedule made (or tried to)."""

    at: dt.datetime = field("When it started.")
    ok: bool = field("Whether it was made, read back whole and copied to every backup.copy_to.")
    archive: str = field("The archive's name; empty when none was made.", "")
    copies: list[str] = field("Where it was copied.", factory=list)
    error: str = field("What went wrong, when it failed.", "")


@attrs.frozen(kw_only=True)
class BackupList:
    """The answer of GET /backups: the archives in the backup folder, newest first."""

    dir: str = field("The backup folder (backup.dir, or its default beside the store).")
    keep: int = field("How many are kept (backup.keep); 0 keeps every one.")
    backups: list[BackupArchive] = field("The archives, newest first.")
    encrypted: bool = field("Whether new archives are encrypted (backup.encrypt_to or backup.passphrase_file).",
                            False)
    copy_to: list[str] = field("Where each new archive is copied (backup.copy_to).", factory=list)
    schedule: str = field("When this server backs up by itself (backup.schedule, as said in words); empty for "
                          "never.", "")
    next_due: dt.datetime | None = field("When the next scheduled backup is due; null without a schedule.", None)
    last_scheduled: ScheduledRun | None = field(
        "The last scheduled backup on this control plane since it started; null before the first.", None)
