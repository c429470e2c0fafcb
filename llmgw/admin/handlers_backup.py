"""Handlers of the backup endpoints: make an archive now on this control plane, list those kept.

The work is llmgw.backup's, as `llmgw server backup` does it, on the store
this server has open; the copy and the compression run in a thread, so the
API keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio

from llmgw.admin.backup_types import BackupArchive, BackupList, BackupMade, ScheduledRun
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError


async def make_backup(call: Call) -> BackupMade:
    """Back up now: the store (a consistent copy of a SQLite file, or pg_dump of a PostgreSQL database), the
    folder server.yaml is in and the files it names, into one archive in backup.dir (mode 0600). Older
    archives beyond backup.keep are removed. A second request while one is being made is refused (409)."""
    from llmgw.backup import BackupError
    from llmgw.backup import make_backup as make

    admin = call.admin
    lock = admin.backup_lock  # one at a time: a second request while one is written is refused, not queued
    if lock.locked():
        raise ApiError(409, "a backup is being made on this control plane already; wait for it and ask again")
    async with lock:
        try:
            result = await make(admin.config, config_path=admin.config_path, store=admin.store)
        except BackupError as exc:
            if admin.notifier is not None:
                from llmgw.notify.events import backup_failed

                admin.notifier.emit(backup_failed(str(exc), actor=call.actor))
            raise ApiError(500, f"the backup failed: {exc}") from None
    call.target = f"backup:{result.name}"
    m = result.manifest
    return BackupMade(path=result.path, name=result.name, size=result.size, sha256=result.sha256,
                      created=m.created, store=m.store_kind, schema_version=m.schema_version,
                      config_dir=m.config_dir, config_files=result.config_files, removed=list(result.removed),
                      encrypted=result.encrypted, copies=list(result.copies))


async def list_backups(call: Call) -> BackupList:
    """The archives in the backup folder, newest first, with their size and sha256; whether new ones are
    encrypted, where they are copied, and the schedule with its last outcome."""
    from llmgw.backup import BackupError, backup_dir, list_archives, store_location

    admin = call.admin
    try:
        kind, where = store_location(admin.config, admin.store)
        folder = backup_dir(admin.config, kind, where)
        found = await asyncio.to_thread(list_archives, folder)
    except BackupError as exc:
        raise ApiError(500, str(exc)) from None
    b = admin.config.backup
    job = admin.backup_job
    last = None
    if job is not None and job.last is not None:
        last = ScheduledRun(at=job.last.at, ok=job.last.ok, archive=job.last.archive, copies=list(job.last.copies),
                            error=job.last.error)
    return BackupList(dir=folder, keep=b.keep, backups=[
        BackupArchive(name=a.name, path=a.path, size=a.size, created=a.created, sha256=a.sha256,
                      encrypted=a.encrypted) for a in found],
        encrypted=bool(b.encrypt_to or b.passphrase_file), copy_to=list(b.copy_to),
        schedule=str(job.schedule) if job is not None else "", next_due=job.next_due if job is not None else None,
        last_scheduled=last)

