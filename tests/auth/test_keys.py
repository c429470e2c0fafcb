"""Keys: secrets, and the resolver from secret to principal."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import string

import pytest

from llmgw.auth.keys import (
    KEY_PREFIX,
    KeyResolver,
    hash_secret,
    looks_like_secret,
    model_aliases,
    new_secret,
    visible_prefix,
)
from llmgw.auth.principal import AuthError
from llmgw.auth.tenancy import Tenancy
from llmgw.config import parse_server_config
from llmgw.store import Store, StoreUnavailable

from .conftest import FakeClock, Ticker, tenancy_for


async def make_tree(t: Tenancy):
    await t.create("acme")
    await t.create("acme/search")
    await t.create("acme/search/indexer")
    ann = await t.create_user("ann@example.com", "Ann")
    await t.add_member("ann@example.com", "acme/search")
    return ann


def test_a_secret_has_the_prefix_and_40_url_safe_characters() -> None:
    secrets = {new_secret() for _ in range(200)}
    assert len(secrets) == 200
    allowed = set(string.ascii_letters + string.digits + "-_")
    for s in secrets:
        assert s.startswith(KEY_PREFIX) and len(s) == len(KEY_PREFIX) + 40
        assert set(s[len(KEY_PREFIX):]) <= allowed
        assert looks_like_secret(s)
        assert hash_secret(s) == hashlib.sha256(s.encode()).hexdigest()
        assert visible_prefix(s) == s[:12]
    assert not looks_like_secret("sk-something")


async def test_a_key_resolves_to_its_principal(store: Store, clock: FakeClock) -> None:
    t = tenancy_for(store, clock)
    ann = await make_tree(t)
    issued = await t.create_key(project="acme/search/indexer", user="ann@example.com", name="laptop",
                                ttl=dt.timedelta(days=30), band="gold", models=["qwen3-8b", "llama"])
    await t.set_limits(await t.scope("acme"), rpm=100, budget_micros=5_000_000, budget_period="day")
    await t.set_limits(await t.scope("project:acme/search/indexer"), tpm=1000)
    node = await t.find("acme/search/indexer")

    resolver = KeyResolver(store, clock=clock)
    p = await resolver.resolve(issued.secret)
    assert (p.key_id, p.key_prefix, p.key_name, p.kind) == (issued.key.id, issued.secret[:12], "laptop", "member")
    assert (p.org_id, p.team_id, p.project_id, p.user_id) == (node.org.id, node.team.id, node.id, ann.id)
    assert p.band == "gold"
    assert p.allowed_models == {"qwen3-8b", "llama"}
    assert [(lim.scope_kind, lim.rpm, lim.tpm) for lim in p.limits] == [("org", 100, None), ("project", None, 1000)]
    assert p.expires_at == clock.now + dt.timedelta(days=30)

    personal = await t.create_key(user="ann@example.com")
    p = await resolver.resolve(personal.secret)
    assert (p.kind, p.org_id, p.project_id, p.user_id, p.band, p.allowed_models) == (
        "personal", None, None, ann.id, None, None)


async def test_revoked_and_expired_keys_get_401_saying_which(store: Store, clock: FakeClock) -> None:
    t = tenancy_for(store, clock)
    await make_tree(t)
    revoked = await t.create_key(project="acme/search/indexer")
    expiring = await t.create_key(project="acme/search/indexer", ttl=dt.timedelta(hours=1))
    await t.revoke_key(revoked.key.id)
    resolver = KeyResolver(store, clock=clock)

    with pytest.raises(AuthError) as err:
        await resolver.resolve(revoked.secret)
    assert (err.value.status, err.value.code) == (401, "invalid_api_key")
    assert "revoked" in err.value.message and revoked.secret not in err.value.message

    await resolver.resolve(expiring.secret)
    clock.advance(3600)  # the cached entry is still fresh: expiry is judged at every request
    with pytest.raises(AuthError) as err:
        await resolver.resolve(expiring.secret)
    assert err.value.status == 401 and "expired" in err.value.message
    assert expiring.secret not in err.value.message

    for bad in ("", "   ", "llmgw-" + "x" * 40, "not a key"):
        with pytest.raises(AuthError) as err:
            await resolver.resolve(bad)
        assert (err.value.status, err.value.code) == (401, "invalid_api_key")
        assert bad.strip() == "" or bad not in err.value.message


async def test_a_suspended_owner_gets_403(store: Store, clock: FakeClock) -> None:
    resolver = KeyResolver(store, clock=clock)
    t = tenancy_for(store, clock, on_change=resolver.invalidate)
    await make_tree(t)
    member = await t.create_key(project="acme/search/indexer", user="ann@example.com")
    service = await t.create_key(project="acme/search/indexer")
    await resolver.resolve(member.secret)

    await t.set_user_state("ann@example.com", "suspended")
    with pytest.raises(AuthError) as err:
        await resolver.resolve(member.secret)
    assert (err.value.status, err.value.code) == (403, "account_suspended")
    assert "suspended" in err.value.message
    assert (await resolver.resolve(service.secret)).kind == "service"  # a project's key is nobody's

    await t.set_user_state("ann@example.com", "active")
    assert (await resolver.resolve(member.secret)).kind == "member"


async def test_the_cache_answers_without_the_store_until_ttl_or_invalidation(
    store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    t = tenancy_for(store, clock)
    await make_tree(t)
    issued = await t.create_key(project="acme/search/indexer")
    resolver = KeyResolver(store, ttl=10, negative_ttl=10, clock=clock, monotonic=ticker)

    for _ in range(5):
        await resolver.resolve(issued.secret)
    assert resolver.lookups == 1

    # Revoked by another process: seen once the entry's time is up.
    await store.revoke_key(issued.key.id)
    assert (await resolver.resolve(issued.secret)).key_id == issued.key.id
    ticker.advance(11)
    with pytest.raises(AuthError, match="revoked"):
        await resolver.resolve(issued.secret)
    assert resolver.lookups == 2

    # Changed here: invalidate makes it immediate.
    other = await t.create_key(project="acme/search/indexer")
    await resolver.resolve(other.secret)
    await store.revoke_key(other.key.id)
    resolver.invalidate(other.key.id)
    with pytest.raises(AuthError, match="revoked"):
        await resolver.resolve(other.secret)

    # A secret nobody has is remembered too.
    nobody = new_secret()
    for _ in range(3):
        with pytest.raises(AuthError):
            await resolver.resolve(nobody)
    assert resolver.lookups == 5

    resolver.invalidate()
    assert resolver.cached == 0


async def test_concurrent_lookups_of_one_key_are_one_store_query(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock)
    await make_tree(t)
    issued = await t.create_key(project="acme/search/indexer")
    resolver = KeyResolver(sqlite_store, clock=clock)
    principals = await asyncio.gather(*(resolver.resolve(issued.secret) for _ in range(50)))
    assert {p.key_id for p in principals} == {issued.key.id}
    assert resolver.lookups == 1


async def test_the_cache_is_bounded(sqlite_store: Store, clock: FakeClock) -> None:
    resolver = KeyResolver(sqlite_store, max_entries=3, clock=clock)
    for i in range(10):
        with pytest.raises(AuthError):
            await resolver.resolve(f"llmgw-nobody-{i}")
    assert resolver.cached == 3


async def test_allowlists_intersect_along_the_chain(store: Store, clock: FakeClock) -> None:
    t = tenancy_for(store, clock)
    await make_tree(t)
    await t.set_limits(await t.scope("org:acme"), allowed_models=["a", "b", "c", "d"])
    await t.set_limits(await t.scope("team:acme/search"), allowed_models=["b", "c", "d"])
    await t.set_limits(await t.scope("project:acme/search/indexer"), allowed_models=["c", "d", "e"])
    issued = await t.create_key(project="acme/search/indexer", models=["d", "c", "x"])
    await t.set_limits(await t.scope(f"key:{issued.key.id}"), allowed_models=["d"])
    p = await KeyResolver(store, clock=clock).resolve(issued.secret)
    assert p.allowed_models == {"d"}
    assert p.may_use("d") and not p.may_use("c") and not p.may_use("a")

    none = await t.create_key(user="ann@example.com")  # a personal key: only its own (no) list
    assert (await KeyResolver(store, clock=clock).resolve(none.secret)).allowed_models is None


async def test_allowlists_compare_models_not_spellings(sqlite_store: Store, clock: FakeClock) -> None:
    endpoints = [{"url": "http://engine:8000/v1"}]
    config = parse_server_config({"models": [
        {"name": "llama-3.1-8b", "aliases": ["llama"], "endpoints": endpoints},
        {"name": "qwen3-8b", "aliases": ["qwen"], "endpoints": endpoints},
    ]})
    t = tenancy_for(sqlite_store, clock)
    await make_tree(t)
    await t.set_limits(await t.scope("acme"), allowed_models=["llama", "qwen3-8b"])
    issued = await t.create_key(project="acme/search/indexer", models=["llama-3.1-8b"])
    p = await KeyResolver(sqlite_store, aliases=model_aliases(config), clock=clock).resolve(issued.secret)
    assert p.allowed_models == {"llama-3.1-8b", "llama"}
    assert p.may_use("llama") and p.may_use("llama-3.1-8b") and not p.may_use("qwen")


async def test_last_used_times_are_written_in_bulk(store: Store, clock: FakeClock) -> None:
    t = tenancy_for(store, clock)
    await make_tree(t)
    a = await t.create_key(project="acme/search/indexer")
    b = await t.create_key(project="acme/search/indexer")
    resolver = KeyResolver(store, touch_interval=3600, clock=clock)
    await resolver.start()
    await resolver.resolve(a.secret)
    clock.advance(5)
    await resolver.resolve(b.secret)
    assert (await store.get_key(a.key.id)).last_used_at is None  # not on the request path
    await resolver.stop()
    assert (await store.get_key(a.key.id)).last_used_at == clock.now - dt.timedelta(seconds=5)
    assert (await store.get_key(b.key.id)).last_used_at == clock.now


class FlakyStore:
    """A store whose key look-ups fail while ``down``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False

    async def resolve_key(self, key_hash: str):
        if self.down:
            raise StoreUnavailable("the database is gone")
        return await self.store.resolve_key(key_hash)

    async def touch_keys(self, last_used):
        if self.down:
            raise StoreUnavailable("the database is gone")
        return await self.store.touch_keys(last_used)


async def test_a_store_outage_serves_known_keys_and_refuses_unknown_ones(
    sqlite_store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    t = tenancy_for(sqlite_store, clock)
    await make_tree(t)
    issued = await t.create_key(project="acme/search/indexer")
    flaky = FlakyStore(sqlite_store)
    resolver = KeyResolver(flaky, ttl=5, stale_grace=60, clock=clock, monotonic=ticker)  # type: ignore[arg-type]
    await resolver.resolve(issued.secret)
    flaky.down = True
    ticker.advance(30)
    assert (await resolver.resolve(issued.secret)).key_id == issued.key.id
    assert await resolver.flush_last_used() == 0  # kept for later
    with pytest.raises(AuthError) as err:
        await resolver.resolve(new_secret())
    assert err.value.status == 503
    ticker.advance(60)
    with pytest.raises(AuthError) as err:
        await resolver.resolve(issued.secret)
    assert err.value.status == 503
    flaky.down = False
    assert await resolver.flush_last_used() == 1


async def test_a_store_outage_is_logged_once_a_while_not_once_a_request(
    sqlite_store: Store, clock: FakeClock, ticker: Ticker, caplog
) -> None:
    t = tenancy_for(sqlite_store, clock)
    await make_tree(t)
    issued = await t.create_key(project="acme/search/indexer")
    flaky = FlakyStore(sqlite_store)
    resolver = KeyResolver(flaky, ttl=5, stale_grace=120, clock=clock, monotonic=ticker)  # type: ignore[arg-type]
    await resolver.resolve(issued.secret)
    flaky.down = True
    ticker.advance(6)
    caplog.set_level("WARNING", logger="llmgw.auth")
    for _ in range(200):
        await resolver.resolve(issued.secret)
    said = [r for r in caplog.records if "as last seen" in r.getMessage()]
    assert len(said) == 1
    ticker.advance(31)
    await resolver.resolve(issued.secret)
    said = [r for r in caplog.records if "as last seen" in r.getMessage()]
    assert len(said) == 2 and said[1].fields["requests"] == 200  # the 199 after the first warning, and this one
    assert issued.secret not in caplog.text
