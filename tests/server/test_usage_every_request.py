"""A usage row for every request, whatever it held: thousands of generated requests (random `user`, Anthropic
`metadata.user_id`, `x-llmgw-tags` and model names: unicode, control characters, NUL, lone surrogates, huge
values) through the real gateway with the openai SDK and raw aiohttp. Every answered request has its row, and
the spend /me reports is the same after a restart."""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import openai
import pytest

from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app
from llmgw.store import open_store

from .serving import project_key, serve, sim_engine

pytestmark = pytest.mark.slow  # thousands of requests
SEED = 20261201
ALPHABET = ["a", "é", "文", "😀", "\x00", "\x1b", "\n", "\t", "\x7f", "\u202e", "\ufeff", " ", "\\", '"', "%"]


def text(rng: random.Random) -> str:
    size = rng.choice([0, 1, 5, 40, 300, 5000, 70_000])
    return "".join(rng.choice(ALPHABET) for _ in range(size))


def header_text(rng: random.Random) -> str:
    """What the SDK sends in a header (printable ASCII and tabs): commas, blanks, long runs."""
    size = rng.choice([1, 10, 200, 4000])
    inner = "".join(rng.choice(["a", "\t", ",", " ", "z", "%", "\\"]) for _ in range(size))
    return f"a{inner}z"  # no blank at either end, which the SDK's HTTP layer refuses


def raw_header(rng: random.Random) -> bytes:
    """What no client library sends but a socket can: bytes past ASCII in a header, read as latin-1, among them
    the C1 control characters (U+0080-U+009F). (C0 ones are refused by the HTTP parser, before the gateway.)"""
    size = rng.choice([1, 10, 200, 4000])
    return bytes(rng.choice([0x09, 0x2C, 0x61, 0xE9, 0xFF, 0x80, 0x85, 0x9B]) for _ in range(size))


@pytest.fixture
async def engine():
    async with sim_engine("m") as running:
        yield running


async def test_every_answered_request_has_its_row_and_the_spend_survives_a_restart(engine, tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, _, secret = await project_key(store, "fuzz", "fuzz")
    await store.close()
    config = parse_server_config({
        "store": {"dsn": db}, "accounting": {"flush_interval": "50ms"},
        "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "price": {"input": 1.0, "output": 2.0}}],
    })

    rng = random.Random(SEED)
    runner, base = await serve(make_gateway_app(config))
    answered: list[str] = []
    gate = asyncio.Semaphore(32)
    auth = {"Authorization": f"Bearer {secret}"}
    try:
        async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client, \
                aiohttp.ClientSession() as http:
            async def sdk(user: str, tags: str, model: str) -> None:
                async with gate:
                    try:
                        raw = await client.chat.completions.with_raw_response.create(
                            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3, user=user,
                            extra_headers={"x-llmgw-tags": tags})
                        answered.append(raw.headers["x-request-id"])
                    except openai.APIStatusError as exc:
                        answered.append(exc.response.headers["x-request-id"])

            async def anthropic(user_id: str, model: str) -> None:
                body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}],
                        "metadata": {"user_id": user_id}}
                data = json.dumps(body, ensure_ascii=True).encode()  # lone surrogates travel as \\ud800 escapes
                async with gate, http.post(base + "/messages", data=data,
                                           headers={**auth, "Content-Type": "application/json"}) as resp:
                    await resp.read()
                    answered.append(resp.headers["x-request-id"])

            host, port = base.removeprefix("http://").removesuffix("/v1").split(":")

            async def raw(tags: bytes) -> None:
                """A request written on a socket, its x-llmgw-tags holding control characters."""
                body = json.dumps({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
                head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {secret}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n")
                async with gate:
                    reader, writer = await asyncio.open_connection(host, int(port))
                    writer.write(head.encode() + b"x-llmgw-tags: " + tags + b"\r\n\r\n" + body.encode())
                    await writer.drain()
                    answer = await reader.read()
                    writer.close()
                for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"x-request-id":
                        answered.append(value.strip().decode())

            jobs = [raw(raw_header(rng)) for _ in range(200)]
            for i in range(2000):
                model = "m" if rng.random() < 0.85 else rng.choice(["m\x00", "m\ud800", "\x1b[31m", "文" * 300, text(rng)])
                if i % 3 == 2:
                    user = text(rng) + rng.choice(["", "\ud800", "\udfff"])
                    jobs.append(anthropic(user, model))
                else:
                    user = text(rng)
                    if "\x00" in user or rng.random() < 0.1:
                        user = user.replace("\x00", "")  # the SDK's JSON carries NUL fine; keep both kinds
                    model = model.encode("utf-8", "replace").decode()  # JSON from the SDK cannot hold a lone surrogate
                    jobs.append(sdk(user + rng.choice(["", "\x00"]), header_text(rng), model))
            await asyncio.gather(*jobs)
            async with http.get(base + "/me", headers=auth) as resp:
                before = (await resp.json())["spend"]
    finally:
        await runner.cleanup()
    assert len(answered) == 2200 and len(set(answered)) == 2200

    store = await open_store(db)
    try:
        rows = await store.list_usage(project_id=project.id, limit=10_000)
    finally:
        await store.close()
    assert {r.request_id for r in rows} == set(answered)  # one row for every answered request, none refused

    runner, base = await serve(make_gateway_app(config))  # a restart: the spend comes back from the rows
    try:
        async with aiohttp.ClientSession() as http, http.get(base + "/me", headers=auth) as resp:
            after = (await resp.json())["spend"]
    finally:
        await runner.cleanup()
    spent = {s["scope"]: s["spent_micros"] for s in before}
    assert spent["project"] > 0
    assert spent == {s["scope"]: s["spent_micros"] for s in after}
