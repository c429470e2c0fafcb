"""The storage-quota endpoints: a project's own quota over router.clients.project_storage_bytes (what
`llmgw keys quota` changes), with what the project keeps now. A running gateway reads a change within
30 seconds."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.storage_types import StorageQuota
from llmgw.store.client_data import SERVER_QUOTA, ProjectFeatures


async def _project(call: Call, path: str):
    return await call.admin.tenancy(call.store, call.actor).find(path, "project")


async def _answer(call: Call, node, features: ProjectFeatures) -> StorageQuota:
    server = int(call.admin.config.router.clients.project_storage_bytes)
    own = features.storage_quota_bytes
    return StorageQuota(project=node.path, project_id=node.id, storage_quota_bytes=own, server_quota_bytes=server,
                        effective_bytes=server if own is None else own,
                        used_bytes=await call.store.storage_used(node.id))


async def get_storage_quota(call: Call) -> StorageQuota:
    """A project's storage quota and what it keeps now."""
    node = await _project(call, call.query.project)
    return await _answer(call, node, await call.store.get_project_features(node.id))


async def set_storage_quota(call: Call) -> StorageQuota:
    """Give a project its own storage quota (0: no limit), or (null) the server's again."""
    b = call.body
    node = await _project(call, b.project)
    call.target = f"project:{node.id}"
    change = SERVER_QUOTA if b.storage_quota_bytes is None else b.storage_quota_bytes
    features = await call.store.set_project_features(node.id, actor=call.actor, storage_quota_bytes=change)
    return await _answer(call, node, features)


__all__ = ["get_storage_quota", "set_storage_quota"]
