"""Keys hashed with the cluster's secret: made keyed, old hashes moved at first use, one secret per store."""

from __future__ import annotations

import hashlib
import hmac
import types

import pytest

from llmgw.auth.key_hash import FINGERPRINT_SETTING, KeyHasher, KeyHashError, ensure_key_hasher, key_hasher_of
from llmgw.auth.keys import KeyResolver, hash_secret
from llmgw.auth.tenancy import Tenancy
from llmgw.store import Store


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
