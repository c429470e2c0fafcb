"""What the storage-quota endpoints read and answer: how much a project may keep (files, batch results,
thread turns, memory notes, stored responses) and how much it keeps now."""

from __future__ import annotations

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field


@attrs.frozen(kw_only=True)
class StorageQuotaQuery:
    project: str = field("The project's path: ORG/PROJECT or ORG/TEAM/PROJECT.", schema=forms.ORG_PATH)


@attrs.frozen(kw_only=True)
class StorageQuotaSet:
    """A project's own storage quota, over the server's router.clients.project_storage_bytes."""

    project: str = field("The project's path: ORG/PROJECT or ORG/TEAM/PROJECT.", schema=forms.ORG_PATH)
    storage_quota_bytes: int | None = field(
        "Bytes the project may keep; 0 is no limit; null uses the server's router.clients.project_storage_bytes "
        "again.", schema={"minimum": 0})


@attrs.frozen(kw_only=True)
class StorageQuota:
    """A project's storage quota and what it keeps now."""

    project: str = field("The project's path.")
    project_id: str = field("The project's id, prj-….")
    storage_quota_bytes: int | None = field("The project's own quota in bytes (0: no limit); null when the "
                                            "server's applies.")
    server_quota_bytes: int = field("The server's router.clients.project_storage_bytes (0: no limit).")
    effective_bytes: int = field("The quota that applies: the project's own, else the server's (0: no limit).")
    used_bytes: int = field("What the project keeps now: files, batch results, thread turns, memory notes and "
                            "stored responses.")


__all__ = ["StorageQuota", "StorageQuotaQuery", "StorageQuotaSet"]
