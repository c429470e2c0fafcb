"""Backups: the store and the configuration in one archive, and putting them back.

- :mod:`llmgw.backup.archive`: the archive's name, manifest, writing and checking it, the backup folder.
- :mod:`llmgw.backup.make`: `make_backup()`, from the command line or from a running server.
- :mod:`llmgw.backup.restore`: `plan_restore()`, `check_not_in_use()`, `apply_restore()`.
- :mod:`llmgw.backup.pg`: pg_dump and pg_restore for a PostgreSQL store.

docs/backup.md is the operator's page.
"""

from llmgw.backup.archive import (
    ArchiveDamaged,
    ArchiveEntry,
    BackupError,
    Manifest,
    ManifestFile,
    list_archives,
)
from llmgw.backup.make import BackupResult, backup_dir, make_backup, store_location

__all__ = [
    "ArchiveDamaged",
    "ArchiveEntry",
    "BackupError",
    "BackupResult",
    "Manifest",
    "ManifestFile",
    "backup_dir",
    "list_archives",
    "make_backup",
    "store_location",
]
