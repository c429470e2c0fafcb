"""Forgetting a person leaves nothing of their identity or their text in the store; usage sums stay true.

A person uses the gateway with a personal key (the Responses API keeps an
answer, a file is uploaded, a batch is made), has portal sessions, a reset
link, memberships and usage; then they are forgotten, and the store's own
bytes (the SQLite file, a pg_dump of the PostgreSQL database) are searched
for their email, their name and the prompt they sent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess

import openai
from aiohttp import web

from llmgw.auth.keys import KeyResolver
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.server import make_gateway_app
from llmgw.store import UsageRow, open_store

from .conftest import tenancy_for

EMAIL = "Annabel.Quux@example.com"
NAME = "Annabel Quux"
PROMPT = "The purple giraffe recites sonnets at midnight"
UTC = dt.UTC


class _Accountant:
    """Admits everything; the usage rows of this test are written to the store by the test itself."""

    async def admit(self, principal, model, *, prompt_tokens, max_tokens):
        from llmgw.accounting.api import Reservation

        return Reservation(principal=principal, model=model, reserved_micros=0, prompt_tokens_estimate=0)

    async def settle(self, reservation, **kw):
        return 0

    def release(self, reservation):
        pass

    def cost(self, model, prompt_tokens, completion_tokens, cached_tokens=0):
        return 0

    def record(self, row):
        pass


async def _engine():
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


async def _use_the_gateway(store_dsn: str, secret: str, member_secret: str) -> str:
    """Use the gateway as the person would; the id of the batch they made."""
    """The person's requests through a real gateway with the real key resolver, on a store of its own
    (the same database), closed with it: with their personal key an answer kept, a file, a batch; with
    their member key a turn of a project's thread and a memory note."""
    store = await open_store(store_dsn)
    engine, url = await _engine()
    config = parse_server_config({"store": {"dsn": "/nonexistent/llmgw.db"}, "auth": {"keys_required": True},
                                  "models": [{"name": "m", "endpoints": [{"url": url}]}]})
    app = make_gateway_app(config, store=store, resolver=KeyResolver(store), accountant=_Accountant(),
                           metrics=GatewayMetrics())
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{runner.addresses[0][1]}/v1", api_key=secret,
                                max_retries=0)
    try:
        kept = await client.responses.create(model="m", input=PROMPT, store=True, max_output_tokens=16)
        assert (await store.get_response(kept.id)) is not None
        line = {"custom_id": "c-1", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": PROMPT}]}}
        uploaded = await client.files.create(file=("mine.jsonl", (json.dumps(line) + "\n").encode()),
                                             purpose="batch")
        batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                            completion_window="24h", metadata={"owner": NAME})
        member = openai.AsyncOpenAI(base_url=client.base_url, api_key=member_secret, max_retries=0)
        try:
            await member.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}],
                                                 extra_headers={"x-llmgw-thread": "notes-1"})
        finally:
            await member.close()
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.put(f"{str(client.base_url).rstrip('/')}/memory/about-me",
                                headers={"Authorization": f"Bearer {member_secret}"},
                                json={"text": f"{NAME} says: {PROMPT}"}) as resp:
                assert resp.status == 201, await resp.text()
    finally:
        await client.close()
        await runner.cleanup()
        await engine.cleanup()
        await store.close()
    return batch.id


def _usage(request_id: str, at: dt.datetime, user_id: str, key_id: str, cost: int, email: str,
           name: str) -> UsageRow:
    """A request's row as the usage writer keeps it: the client's `user` and metadata name the person."""
    return UsageRow(request_id=request_id, at=at, key_id=key_id, user_id=user_id, model_requested="m",
                    model_served="m", replica="m/endpoint-0", prompt_tokens=10, completion_tokens=5,
                    cost_micros=cost, latency_ms=30, client_user=email, metadata={"who": name})


def _store_bytes(store_dsn: str, request) -> bytes:
    """Everything the store holds, as bytes: the SQLite file (and its journal), or a pg_dump."""
    if store_dsn.startswith("sqlite:"):
        path = store_dsn[len("sqlite://"):]
        import pathlib

        files = [p for p in pathlib.Path(path).parent.iterdir() if p.name.startswith(pathlib.Path(path).name)]
        return b"".join(p.read_bytes() for p in files)
    server = request.getfixturevalue("postgres_server")
    database = store_dsn.rsplit("/", 1)[1]
    done = subprocess.run(
        [str(server.bin_dir / "pg_dump"), "-h", server.host, "-p", str(server.port), "-U", server.user,
         "--no-owner", database], capture_output=True, timeout=120, check=True)
    return done.stdout


def _traces(data: bytes) -> list[str]:
    found = []
    for needle in (EMAIL, EMAIL.lower(), NAME, PROMPT, "Annabel", "annabel"):
        for encoded in (needle.encode(), needle.encode("utf-16-le")):
            if encoded in data:
                found.append(needle)
    return found


async def _sums(store) -> tuple[int, int, int]:
    since, until = dt.datetime(2025, 1, 1, tzinfo=UTC), dt.datetime(2026, 12, 31, tzinfo=UTC)
    rows = await store.usage_sums(None, "day", since, until)
    return (sum(r.requests for r in rows), sum(r.cost_micros for r in rows),
            sum(r.prompt_tokens + r.completion_tokens for r in rows))


async def test_forget_leaves_no_trace_of_the_person_and_keeps_usage_sums(store, store_dsn, clock, request):
    t = tenancy_for(store, clock, actor="admin@example.com")
    await t.create("acme")
    await t.create("acme/ml")
    await t.create("acme/ml/train")
    ann = await t.create_user(EMAIL, NAME)
    bob = await t.create_user("bob@example.com", "Bob Other")
    await t.add_member(EMAIL, "acme/ml/train")
    personal = await t.create_key(user=EMAIL, name=f"{NAME}'s laptop")
    member = await t.create_key(user=EMAIL, project="acme/ml/train", name="notebook")
    bobs = await t.create_key(user="bob@example.com")
    await t.set_limits(await t.scope(f"user:{EMAIL}"), rpm=60)
    await store.create_web_session(token_hash=hashlib.sha256(b"cookie").hexdigest(), user_id=ann.id,
                                   csrf_token="csrf", expires_at=clock.now + dt.timedelta(hours=8),
                                   client="10.0.0.7", user_agent="Annabel's browser")
    await store.create_password_reset(token_hash=hashlib.sha256(b"link").hexdigest(), user_id=ann.id,
                                      expires_at=clock.now + dt.timedelta(hours=1))
    train = await t.find("acme/ml/train")
    await store.set_project_features(train.id, actor="test", threads=True, memory=True)
    bob_note = await store.put_memory_note(train.id, "default", "bobs", "Bob Other's note", user_id=bob.id)
    batch_id = await _use_the_gateway(store_dsn, personal.secret, member.secret)
    await store.enqueue_mail(kind="reset_link", to=EMAIL.lower(), subject="Set a new password",
                             body=f"Hello {NAME}: https://llm.example.com/reset/abc")
    at = clock.now
    await store.insert_usage_rows([
        _usage("r1", at, ann.id, personal.key.id, 700, EMAIL, NAME),
        _usage("r2", at, ann.id, member.key.id, 300, EMAIL, NAME),
        _usage("r3", at, bob.id, bobs.key.id, 50, "bob@example.com", "Bob Other")])
    before = await _sums(store)
    assert before[0] == 3

    batch = await store.get_batch(batch_id)
    # the input, and the batch's output and error files once the batch worker has run it (a race with the test)
    their_files = 1 + sum(1 for f in (batch.output_file_id, batch.error_file_id) if f)

    report = await t.forget_user(EMAIL)
    assert report is not None and report.pseudonym.startswith("forgotten-") and not report.already_forgotten
    assert (report.keys_revoked, report.sessions, report.reset_links, report.memberships) == (2, 1, 1, 1)
    assert report.responses == 1 and report.batches == 1 and report.files == their_files and report.limits == 1
    assert report.mail == 1 and await store.list_mail() == []
    assert report.thread_turns == 1 and report.memory_notes == 1
    assert await store.get_thread_turns(train.id, "notes-1") == []
    assert await store.get_memory_note(train.id, "default", "about-me") is None
    assert (await store.get_memory_note(train.id, "default", "bobs")).text == bob_note[0].text
    assert report.usage_rows == 2 and report.usage_sums >= 2 and report.audit_events >= 4

    # usage kept, under the pseudonym; Bob untouched
    assert await _sums(store) == before
    mine = await store.usage_sums("user", "day", at - dt.timedelta(days=1), at + dt.timedelta(days=1))
    by_user = {r.group: r.cost_micros for r in mine}
    assert by_user == {report.pseudonym: 1000, bob.id: 50}
    row = await store.get_usage("r1")
    assert row.user_id == report.pseudonym and row.client_user is None and row.metadata is None
    # keys revoked, the person's row holds only the pseudonym
    assert all(k.revoked_at is not None for k in await store.list_keys(user_id=ann.id))
    assert (await store.get_key(bobs.key.id)).revoked_at is None
    gone = await store.get_user(ann.id)
    assert gone.email == f"{report.pseudonym}@forgotten.invalid" and gone.password_hash is None
    assert gone.state == "suspended"
    # the audit log says who forgot whom, by the pseudonym
    events = await store.list_audit(limit=1000)
    (forget,) = [e for e in events if e.action == "users.forget"]
    assert forget.actor == "admin@example.com" and forget.target == f"user:{report.pseudonym}"
    assert forget.detail["removed"]["keys_revoked"] == 2
    assert any(e.action == "users.create" and e.detail.get("email") == report.pseudonym for e in events)

    # run twice: nothing left
    assert await t.forget_user(EMAIL) is None
    again = await t.forget_user(ann.id)
    assert again.already_forgotten and not again.removed_anything and again.pseudonym == report.pseudonym

    await store.close()
    data = _store_bytes(store_dsn, request)
    assert b"Bob Other" in data and b"bob@example.com" in data  # the search does find what is there
    assert _traces(data) == []


async def test_forget_an_unknown_person_changes_nothing(store, clock):
    t = tenancy_for(store, clock)
    await t.create_user("carol@example.com", "Carol")
    assert await t.forget_user("nobody@example.com") is None
    assert [e.action for e in await store.list_audit(limit=10)] == ["users.create"]
