"""Keys made on the account page (shown once, working with the openai SDK), revoked,
the editor snippets, and the chat page's short-lived keys."""

from __future__ import annotations

import asyncio
import json
import re

import openai
import pytest

from llmgw.web.account import CHAT_KEY_NAME

from .conftest import Site

HELLO = [{"role": "user", "content": "Hello there."}]
_SECRET = re.compile(r"llmgw-[A-Za-z0-9_-]{40}")


async def _make_key(b, **fields) -> tuple[str, object]:
    page = await b.submit("/account", "/account/keys", {"name": "laptop", **fields})
    assert page.status == 200, page.text
    found = _SECRET.findall(page.text)
    assert found, "no key on the page"
    return found[0], page


async def test_a_key_is_shown_once_and_works_with_the_openai_sdk(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    account = await b.get("/account")
    assert "acme/search/indexer" in account.text and "You have no working keys" in account.text
    options = re.search(r'<select name="project">(.*?)</select>', account.text, re.DOTALL).group(1)
    project_id = re.search(r'value="(prj-[^"]+)"', options).group(1)

    secret, made = await _make_key(b, project=project_id, model="m")
    assert made.headers["Cache-Control"] == "no-store"
    assert "not shown again" in made.text
    # The editor snippets carry the key and the model.
    assert f"OPENAI_API_KEY={secret}" in made.text and 'model: &#34;m&#34;' in made.text
    assert "Cline" in made.text and "wire_api" in made.text
    # The Anthropic tools are offered exactly when this gateway serves /v1/messages.
    assert ("ANTHROPIC_AUTH_TOKEN=" + secret in made.text) == site.portal.serves_anthropic
    assert ('wire_api = &#34;responses&#34;' in made.text) == site.portal.serves_responses

    # Listed afterwards by its prefix, never whole.
    account = await b.get("/account")
    assert secret[:12] in account.text and secret not in account.text

    async with openai.AsyncOpenAI(base_url=site.url + "/v1", api_key=secret, max_retries=0) as client:
        answer = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
        assert answer.choices[0].message.content
        stream = await client.chat.completions.create(model="small", messages=HELLO, max_tokens=5, stream=True)
        pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
        assert pieces

    key = (await site.store.list_keys(user_id=(await site.store.get_user_by_email("ayse@example.com")).id))[0]
    assert (key.kind, key.name, key.project_id) == ("member", "laptop", project_id)
    event = (await site.store.list_audit(action="keys.create"))[0]
    assert event.actor == "ayse@example.com" and event.detail["via"] == "portal"
    assert secret not in json.dumps(event.detail)


async def test_a_revoked_key_stops_at_once(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    secret, _ = await _make_key(b, project="")
    # Kept under the cluster's keyed hash, not a plain SHA-256 anyone could check guesses against.
    assert await site.store.get_key_by_hash(__import__("hashlib").sha256(secret.encode()).hexdigest()) is None
    key = await site.store.get_key_by_hash(site.portal.key_hasher.hash(secret))
    assert key.kind == "personal"
    async with openai.AsyncOpenAI(base_url=site.url + "/v1", api_key=secret, max_retries=0) as client:
        await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
        page = await b.submit("/account", f"/account/keys/{key.id}/revoke", {})
        assert page.status == 200 and secret[:12] not in page.text
        with pytest.raises(openai.AuthenticationError, match="revoked"):
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    assert (await site.store.list_audit(action="keys.revoke"))[0].actor == "ayse@example.com"


async def test_nobody_revokes_or_makes_keys_in_what_is_not_theirs(site: Site) -> None:
    await site.person()
    await site.person("bob@example.com", project=None)
    issued = await site.portal.tenancy("test").create_key(user="ayse@example.com", name="ayse's")
    bob = await site.browser("192.0.2.77")
    await bob.sign_in("bob@example.com")
    page = await bob.submit("/account", f"/account/keys/{issued.key.id}/revoke", {})
    assert page.status == 404
    assert (await site.store.get_key(issued.key.id)).revoked_at is None
    refused = await site.store.list_audit(action="keys.revoke")
    assert refused[0].actor == "bob@example.com" and refused[0].detail["outcome"] == "refused"
    project = await site.store.list_projects()
    page = await bob.submit("/account", "/account/keys", {"name": "sneaky", "project": project[0].id})
    assert page.status == 400 and "not a project of yours" in page.text


async def test_the_connect_page_shows_every_tool_with_a_placeholder(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    page = await b.get("/account/connect?model=n")
    assert page.status == 200
    for words in ("OPENAI_BASE_URL=http://", "Continue", "Codex", "Cline", "&lt;your key&gt;",
                  "apiBase: http://", 'model = &#34;n&#34;'):
        assert words in page.text, words
    assert "capabilities: [tool_use]" not in page.text  # the catalog says nothing of tools for n
    page = await b.get("/account/connect?model=<script>")
    assert "<script>" not in page.text.split("<body>")[1].replace('<script src="/static/', "")


async def test_the_chat_page_gets_a_short_lived_key_that_streams(site: Site) -> None:
    user = await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    chat = await b.get("/chat")
    assert chat.status == 200 and 'data-models="m,n"' in chat.text
    assert '<script src="/static/chat.js"' in chat.text and "<script>" not in chat.text
    project_id = re.search(r'<option value="(prj-[^"]+)"', chat.text).group(1)

    first = await b.post("/chat/key", {"csrf": chat.csrf, "project": project_id})
    assert first.status == 200 and first.headers["Cache-Control"] == "no-store"
    body = json.loads(first.text)
    secret = body["key"]
    assert _SECRET.fullmatch(secret)
    key = (await site.store.list_keys(user_id=user.id))[0]
    assert key.name == CHAT_KEY_NAME and key.project_id == project_id
    life = key.expires_at - key.created_at
    assert 3500 <= life.total_seconds() <= 3600

    async with openai.AsyncOpenAI(base_url=site.url + "/v1", api_key=secret, max_retries=0) as client:
        stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=8, stream=True)
        assert [c async for c in stream]
        # A new key for the page revokes the one before.
        second = json.loads((await b.post("/chat/key", {"csrf": chat.csrf, "project": project_id})).text)["key"]
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    # Chat keys are not listed among the person's keys.
    assert CHAT_KEY_NAME not in (await b.get("/account")).text

    # Signing out revokes the page's key too.
    async with openai.AsyncOpenAI(base_url=site.url + "/v1", api_key=second, max_retries=0) as client:
        await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
        await b.post("/signout", {"csrf": chat.csrf})
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    assert len(await site.store.list_audit(action="keys.chat")) == 2

    other = await site.browser()
    await other.sign_in("ayse@example.com")
    page = await other.get("/chat")
    refused = await other.post("/chat/key", {"csrf": page.csrf, "project": "prj-notmine"})
    assert refused.status == 403


async def test_usage_from_the_portal_key_reaches_the_account_page(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    secret, _ = await _make_key(b, project="")
    async with openai.AsyncOpenAI(base_url=site.url + "/v1", api_key=secret, max_retries=0) as client:
        for _ in range(3):
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=50)
    user = await site.store.get_user_by_email("ayse@example.com")
    for _ in range(100):
        if await site.store.list_usage(user_id=user.id):
            break
        await asyncio.sleep(0.05)
    page = await b.get("/account")
    spent = re.search(r'Spent this month</h3><p class="figure">([^<]+)</p>', page.text).group(1)
    assert spent.endswith("USD") and spent != "0.00 USD"
