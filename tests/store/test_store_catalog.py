"""The run-time catalog: rows with versions, so concurrent changes are caught."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Conflict, Invalid, Store, open_store

from .conftest import FakeClock

SPEC = {"name": "qwen", "engine": "sim", "profiles": [{"name": "default"}], "scaling": {"min": 1, "max": 2}}


async def test_create_read_change_delete(store: Store, clock: FakeClock) -> None:
    assert await store.get_catalog_entry("qwen") is None
    assert await store.list_catalog_entries() == []

    created = await store.put_catalog_entry("qwen", "model", SPEC, actor="ann", expect_version=0)
    assert (created.name, created.kind, created.version, created.actor) == ("qwen", "model", 1, "ann")
    assert created.spec == SPEC and created.created_at == created.updated_at == clock.now
    assert await store.get_catalog_entry("qwen") == created

    clock.advance(60)
    spec2 = {**SPEC, "scaling": {"min": 0, "max": 3}}
    changed = await store.put_catalog_entry("qwen", "model", spec2, actor="bob", expect_version=1)
    assert changed.version == 2 and changed.spec == spec2 and changed.actor == "bob"
    assert changed.created_at == created.created_at and changed.updated_at == clock.now
    assert await store.get_catalog_entry("qwen") == changed

    # Without a version, the write goes through whatever is there.
    third = await store.put_catalog_entry("qwen", "model", SPEC, actor="ann")
    assert third.version == 3

    await store.put_catalog_entry("big", "scaling", {"min": 2, "max": 4}, actor="ann")
    assert [e.name for e in await store.list_catalog_entries()] == ["big", "qwen"]

    assert await store.delete_catalog_entry("qwen", expect_version=3) is True
    assert await store.delete_catalog_entry("qwen") is False
    assert await store.get_catalog_entry("qwen") is None


async def test_stale_versions_are_refused(store: Store) -> None:
    await store.put_catalog_entry("qwen", "model", SPEC, actor="ann", expect_version=0)
    with pytest.raises(Conflict, match="already in the run-time catalog"):
        await store.put_catalog_entry("qwen", "model", SPEC, actor="bob", expect_version=0)
    await store.put_catalog_entry("qwen", "model", SPEC, actor="ann", expect_version=1)
    with pytest.raises(Conflict, match="at version 2, you read 1"):
        await store.put_catalog_entry("qwen", "model", SPEC, actor="bob", expect_version=1)
    with pytest.raises(Conflict, match="at version 2, you read 1"):
        await store.delete_catalog_entry("qwen", expect_version=1)
    with pytest.raises(Conflict, match="not in the run-time catalog"):
        await store.put_catalog_entry("other", "model", SPEC, actor="bob", expect_version=4)
    assert (await store.get_catalog_entry("qwen")).version == 2


async def test_inputs_are_checked(store: Store) -> None:
    with pytest.raises(Invalid, match="spaces"):
        await store.put_catalog_entry("two words", "model", SPEC, actor="ann")
    with pytest.raises(Invalid, match="kind"):
        await store.put_catalog_entry("qwen", "gpu", SPEC, actor="ann")
    with pytest.raises(Invalid, match="mapping"):
        await store.put_catalog_entry("qwen", "model", ["a"], actor="ann")  # type: ignore[arg-type]
    with pytest.raises(Invalid, match="actor"):
        await store.put_catalog_entry("qwen", "model", SPEC, actor="")
    assert await store.list_catalog_entries() == []


async def test_survives_a_reopen(store_dsn: str) -> None:
    first = await open_store(store_dsn)
    try:
        await first.put_catalog_entry("qwen", "model", SPEC, actor="ann")
    finally:
        await first.close()
    again = await open_store(store_dsn)
    try:
        entry = await again.get_catalog_entry("qwen")
        assert entry is not None and entry.spec == SPEC
        assert entry.created_at.tzinfo is not None and entry.created_at <= dt.datetime.now(dt.UTC)
    finally:
        await again.close()
