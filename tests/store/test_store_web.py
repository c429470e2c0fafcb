"""The portal's sessions and password reset links, on both backends."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib

import pytest

from llmgw.store import Invalid, NotFound, Store

from .conftest import START, FakeClock, Tree

HOUR = dt.timedelta(hours=1)


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_a_session_is_kept_touched_and_closed(store: Store, tree: Tree, clock: FakeClock) -> None:
    s = await store.create_web_session(token_hash=h("a"), user_id=tree.user.id, csrf_token="c1",
                                       expires_at=START + 12 * HOUR, client="192.0.2.1", user_agent="Firefox\n1")
    assert (s.user_id, s.csrf_token, s.client, s.user_agent) == (tree.user.id, "c1", "192.0.2.1", "Firefox1")
    assert s.created_at == s.last_seen_at == START and s.chat_key_id is None
    assert await store.get_web_session(h("a")) == s
    assert await store.get_web_session(h("nothing")) is None

    later = START + dt.timedelta(minutes=5)
    assert await store.touch_web_session(h("a"), later) is True
    assert await store.touch_web_session(h("a"), START) is True  # older: ignored
    assert (await store.get_web_session(h("a"))).last_seen_at == later
    assert await store.touch_web_session(h("nothing"), later) is False

    assert await store.set_web_session_key(h("a"), "key-1") is True
    assert (await store.get_web_session(h("a"))).chat_key_id == "key-1"

    gone = await store.delete_web_session(h("a"))
    assert gone is not None and gone.chat_key_id == "key-1"
    assert await store.get_web_session(h("a")) is None
    assert await store.delete_web_session(h("a")) is None


async def test_signing_out_everywhere_keeps_the_one_asked(store: Store, tree: Tree, clock: FakeClock) -> None:
    other = await store.create_user("bob@example.com", "Bob")
    for i, user in enumerate([tree.user, tree.user, tree.user, other]):
        clock.advance(1)
        await store.create_web_session(token_hash=h(f"s{i}"), user_id=user.id, csrf_token=f"c{i}",
                                       expires_at=clock.now + HOUR)
    assert [s.token_hash for s in await store.list_web_sessions(tree.user.id)] == [h("s2"), h("s1"), h("s0")]
    removed = await store.delete_user_web_sessions(tree.user.id, keep=h("s1"))
    assert sorted(s.token_hash for s in removed) == sorted([h("s0"), h("s2")])
    assert [s.token_hash for s in await store.list_web_sessions(tree.user.id)] == [h("s1")]
    assert len(await store.list_web_sessions(other.id)) == 1
    assert len(await store.delete_user_web_sessions(tree.user.id)) == 1
    assert await store.list_web_sessions(tree.user.id) == []


async def test_stale_sessions_go_by_end_or_idleness(store: Store, tree: Tree, clock: FakeClock) -> None:
    await store.create_web_session(token_hash=h("ends"), user_id=tree.user.id, csrf_token="c", expires_at=START + HOUR)
    await store.create_web_session(token_hash=h("idle"), user_id=tree.user.id, csrf_token="c",
                                   expires_at=START + 10 * HOUR)
    await store.create_web_session(token_hash=h("busy"), user_id=tree.user.id, csrf_token="c",
                                   expires_at=START + 10 * HOUR)
    now = START + 2 * HOUR
    await store.touch_web_session(h("busy"), now - dt.timedelta(minutes=1))
    stale = await store.delete_stale_web_sessions(now=now, idle_before=now - dt.timedelta(minutes=30))
    assert sorted(s.token_hash for s in stale) == sorted([h("ends"), h("idle")])
    assert [s.token_hash for s in await store.list_web_sessions(tree.user.id)] == [h("busy")]


async def test_session_inputs_are_checked(store: Store, tree: Tree) -> None:
    with pytest.raises(Invalid, match="token_hash"):
        await store.create_web_session(token_hash="plain", user_id=tree.user.id, csrf_token="c",
                                       expires_at=START + HOUR)
    with pytest.raises(Invalid, match="timezone"):
        await store.create_web_session(token_hash=h("x"), user_id=tree.user.id, csrf_token="c",
                                       expires_at=dt.datetime(2030, 1, 1))
    with pytest.raises(NotFound):
        await store.create_web_session(token_hash=h("x"), user_id="usr-nobody", csrf_token="c",
                                       expires_at=START + HOUR)


async def test_a_reset_link_works_once_and_until_it_expires(store: Store, tree: Tree, clock: FakeClock) -> None:
    link = await store.create_password_reset(token_hash=h("t1"), user_id=tree.user.id, expires_at=START + HOUR)
    assert link.usable_at(START) and not link.usable_at(START + HOUR)
    assert await store.get_password_reset(h("t1")) == link

    used = await store.use_password_reset(h("t1"), START + dt.timedelta(minutes=10))
    assert used is not None and used.used_at == START + dt.timedelta(minutes=10)
    assert await store.use_password_reset(h("t1"), START + dt.timedelta(minutes=11)) is None  # once
    assert await store.use_password_reset(h("nothing"), START) is None

    await store.create_password_reset(token_hash=h("t2"), user_id=tree.user.id, expires_at=START + HOUR)
    assert await store.use_password_reset(h("t2"), START + HOUR) is None  # expired at the hour
    assert await store.use_password_reset(h("t2"), START + HOUR - dt.timedelta(seconds=1)) is not None


async def test_a_newer_link_replaces_the_unused_ones(store: Store, tree: Tree) -> None:
    await store.create_password_reset(token_hash=h("old"), user_id=tree.user.id, expires_at=START + HOUR)
    await store.create_password_reset(token_hash=h("new"), user_id=tree.user.id, expires_at=START + HOUR)
    assert await store.get_password_reset(h("old")) is None
    assert await store.use_password_reset(h("old"), START) is None
    assert await store.use_password_reset(h("new"), START) is not None


async def test_two_uses_at_once_one_wins(store: Store, tree: Tree) -> None:
    await store.create_password_reset(token_hash=h("race"), user_id=tree.user.id, expires_at=START + HOUR)
    results = await asyncio.gather(*(store.use_password_reset(h("race"), START) for _ in range(5)))
    assert sum(r is not None for r in results) == 1


async def test_stale_links_are_removed(store: Store, tree: Tree) -> None:
    await store.create_password_reset(token_hash=h("a"), user_id=tree.user.id, expires_at=START + HOUR)
    other = await store.create_user("bob@example.com", "Bob")
    await store.create_password_reset(token_hash=h("b"), user_id=other.id, expires_at=START + 3 * HOUR)
    assert await store.delete_stale_password_resets(START + 2 * HOUR) == 1
    assert await store.get_password_reset(h("a")) is None
    assert await store.get_password_reset(h("b")) is not None
