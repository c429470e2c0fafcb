"""Keys hashed with the cluster's secret: made keyed, old hashes moved at first use, one secret per store."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import types

import pytest

from llmgw.auth.key_hash import FINGERPRINT_SETTING, KeyHasher, KeyHashError, ensure_key_hasher, key_hasher_of
from llmgw.auth.keys import KeyResolver, hash_secret
from llmgw.auth.principal import AuthError
from llmgw.auth.tenancy import Tenancy
from llmgw.store import Store, StoreError


def config_in(folder) -> types.SimpleNamespace:
    """What the hashing reads of a server.yaml: the admin token's place and auth.key_hash_secret_file."""
    return types.SimpleNamespace(admin_token_file=str(folder / "admin-token"),
                                 auth=types.SimpleNamespace(key_hash_secret_file=""))


async def test_a_server_makes_its_secret_once_and_the_store_remembers_it(store: Store, tmp_path) -> None:
    config = config_in(tmp_path)
    first = await ensure_key_hasher(config, store)
    secret_file = tmp_path / "key-hash-secret"
    assert first.keyed and secret_file.stat().st_mode & 0o777 == 0o600
    assert (await store.get_setting(FINGERPRINT_SETTING)).value == first.fingerprint()
    again = await ensure_key_hasher(config, store)
    assert again == first  # read back, not made anew
    assert key_hasher_of(config) == first


async def test_a_second_control_plane_without_the_secret_is_refused(store: Store, tmp_path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    await ensure_key_hasher(config_in(tmp_path / "one"), store)
    with pytest.raises(KeyHashError, match="lacks.*copy key-hash-secret"):
        await ensure_key_hasher(config_in(tmp_path / "two"), store)
    assert not (tmp_path / "two" / "key-hash-secret").exists()  # nothing made that would split the keys
    (tmp_path / "two" / "key-hash-secret").write_text("ab" * 32 + "\n")
    with pytest.raises(KeyHashError, match="is not the secret this store's API keys are hashed with"):
        await ensure_key_hasher(config_in(tmp_path / "two"), store)
    (tmp_path / "two" / "key-hash-secret").write_text((tmp_path / "one" / "key-hash-secret").read_text())
    assert (await ensure_key_hasher(config_in(tmp_path / "two"), store)).keyed


async def test_keys_are_stored_under_the_keyed_hash_and_old_ones_move_at_first_use(store: Store, tmp_path) -> None:
    hasher = await ensure_key_hasher(config_in(tmp_path), store)
    keyed = Tenancy(store, actor="test", hasher=hasher)
    await keyed.create("acme")
    await keyed.create("acme/search", project=True)
    new = await keyed.create_key(project="acme/search", name="new")
    stored = await store.get_key(new.key.id)
    assert stored.key_hash == hmac.new(hasher.secret, new.secret.encode(), hashlib.sha256).hexdigest()
    assert stored.key_hash != hash_secret(new.secret)

    # A key made by a tool without the secret (llmgw keys --store …): plain SHA-256 until used.
    plain = await Tenancy(store, actor="test").create_key(project="acme/search", name="old")
    assert (await store.get_key(plain.key.id)).key_hash == hash_secret(plain.secret)

    resolver = KeyResolver(store, hasher=hasher)
    assert (await resolver.resolve(new.secret)).key_id == new.key.id
    assert (await resolver.resolve(plain.secret)).key_id == plain.key.id
    assert (await store.get_key(plain.key.id)).key_hash == hasher.hash(plain.secret)  # moved
    # Found straight away by the keyed hash from now on, by a fresh resolver too.
    fresh = KeyResolver(store, hasher=hasher)
    assert (await fresh.resolve(plain.secret)).key_id == plain.key.id
    assert fresh.lookups == 1


def test_a_damaged_secret_file_is_named(tmp_path) -> None:
    (tmp_path / "key-hash-secret").write_text("not hex\n")
    assert key_hasher_of(config_in(tmp_path)) == KeyHasher()  # tools fall back to the plain hash
    assert KeyHasher().hash("x") == hash_secret("x")


class _MovedFirst:
    """The store as a second gateway sees it: `first`, another gateway on the same store, resolves the key (and
    so moves it to the keyed hash) just before this one tries to move it."""

    def __init__(self, store: Store, first: KeyResolver, secret: str) -> None:
        self._store, self._first, self._secret = store, first, secret

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def rehash_key(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        await self._first.resolve(self._secret)
        return await self._store.rehash_key(key_id, old_hash, new_hash)


async def test_a_key_moved_by_another_gateway_first_keeps_working_here(store: Store, tmp_path) -> None:
    hasher = await ensure_key_hasher(config_in(tmp_path), store)
    await Tenancy(store, actor="test").create("acme")
    await Tenancy(store, actor="test").create("acme/search", project=True)
    plain = await Tenancy(store, actor="test").create_key(project="acme/search", name="old")  # plain SHA-256
    first = KeyResolver(store, hasher=hasher)
    now = [0.0]
    second = KeyResolver(_MovedFirst(store, first, plain.secret), hasher=hasher, ttl=1.0, negative_ttl=5.0,
                         monotonic=lambda: now[0])
    assert (await second.resolve(plain.secret)).key_id == plain.key.id  # moved by the first gateway meanwhile
    assert (await store.get_key(plain.key.id)).key_hash == hasher.hash(plain.secret)
    for t in (0.6, 1.2, 2.0, 4.0):  # past the plain hash's refresh and its time in the cache: never a 401
        now[0] = t
        assert (await second.resolve(plain.secret)).key_id == plain.key.id
        await asyncio.sleep(0)  # a refresh ahead runs


async def test_a_key_found_by_its_plain_hash_and_moved_elsewhere_meanwhile_is_found_by_the_keyed_one(
        store: Store, tmp_path) -> None:
    hasher = await ensure_key_hasher(config_in(tmp_path), store)
    await Tenancy(store, actor="test").create("acme")
    await Tenancy(store, actor="test").create("acme/search", project=True)
    plain = await Tenancy(store, actor="test").create_key(project="acme/search", name="old")
    now = [0.0]

    class _Unmovable(_MovedFirst):  # this gateway cannot move it (a store error): it keeps the plain hash's entry
        async def rehash_key(self, *args):
            raise StoreError("the store does not answer")

    second = KeyResolver(_Unmovable(store, None, plain.secret), hasher=hasher, ttl=1.0, negative_ttl=5.0,
                         monotonic=lambda: now[0])
    assert (await second.resolve(plain.secret)).key_id == plain.key.id
    assert (await KeyResolver(store, hasher=hasher).resolve(plain.secret)).key_id == plain.key.id  # moved elsewhere
    for t in (0.6, 1.2, 2.0, 4.0):  # the plain hash's entry refreshed ahead, then gone: the keyed hash answers
        now[0] = t
        assert (await second.resolve(plain.secret)).key_id == plain.key.id
        await asyncio.sleep(0)


async def test_a_key_moved_by_another_gateway_between_its_two_look_ups_here_is_found(store: Store, tmp_path) -> None:
    hasher = await ensure_key_hasher(config_in(tmp_path), store)
    await Tenancy(store, actor="test").create("acme")
    await Tenancy(store, actor="test").create("acme/search", project=True)
    plain = await Tenancy(store, actor="test").create_key(project="acme/search", name="old")
    first = KeyResolver(store, hasher=hasher)

    class _MovedBetween(_MovedFirst):  # the other gateway moves it after this one missed the keyed hash
        async def resolve_key(self, key_hash: str):
            if key_hash == hash_secret(plain.secret):
                await first.resolve(plain.secret)
            return await self._store.resolve_key(key_hash)

    second = KeyResolver(_MovedBetween(store, first, plain.secret), hasher=hasher)
    assert (await second.resolve(plain.secret)).key_id == plain.key.id  # not a 401
    unknown = KeyResolver(store, hasher=hasher)
    for _ in range(3):  # a secret no key has: three look-ups the first time, then none while the misses are cached
        with pytest.raises(AuthError):
            await unknown.resolve("llmgw-" + "x" * 40)
    assert unknown.lookups == 3


async def test_a_busy_keys_first_requests_move_it_once(store: Store, tmp_path) -> None:
    """Fifty requests at once with a key still under its plain hash: one move, and all of them served."""
    hasher = await ensure_key_hasher(config_in(tmp_path), store)
    await Tenancy(store, actor="test").create("acme")
    await Tenancy(store, actor="test").create("acme/search", project=True)
    plain = await Tenancy(store, actor="test").create_key(project="acme/search", name="old")

    class _Counting:
        moves = 0

        def __init__(self, inner: Store) -> None:
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        async def rehash_key(self, *args):
            _Counting.moves += 1
            await asyncio.sleep(0.01)
            return await self._inner.rehash_key(*args)

    resolver = KeyResolver(_Counting(store), hasher=hasher)
    found = await asyncio.gather(*(resolver.resolve(plain.secret) for _ in range(50)))
    assert {p.key_id for p in found} == {plain.key.id}
    assert _Counting.moves == 1
    assert (await store.get_key(plain.key.id)).key_hash == hasher.hash(plain.secret)
