"""The portal's parts on their own: passwords, the throttle, forwarded addresses,
the editor snippets and the charts."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import make_mocked_request

from llmgw.auth.passwords import Busy, Passwords, WeakPassword, check_strength
from llmgw.web.charts import bar_chart
from llmgw.web.net import (
    client_address,
    is_secure,
    local_path,
    parse_networks,
    public_base,
)
from llmgw.web.snippets import PLACEHOLDER, editor_snippets
from llmgw.web.throttle import SignInThrottle, Throttle

from .conftest import quick_passwords


async def test_argon2id_hashes_verify_and_say_when_to_rehash() -> None:
    passwords = quick_passwords()
    encoded = await passwords.hash("correct horse battery")
    assert encoded.startswith("$argon2id$v=19$m=64,t=1,p=1$")
    assert await passwords.verify(encoded, "correct horse battery")
    assert not await passwords.verify(encoded, "wrong horse battery")
    assert not await passwords.verify(None, "anything")  # no password: checked against a dummy, never true
    assert not await passwords.verify("not a hash", "x")
    assert not passwords.needs_rehash(encoded)
    assert Passwords(time_cost=2, memory_cost=64, parallelism=1).needs_rehash(encoded)
    passwords.close()


async def test_only_so_many_hashes_run_at_once_and_the_rest_are_told_busy() -> None:
    passwords = quick_passwords(slots=2, wait=0.03)
    running = 0
    most = 0
    real = passwords._hasher.hash

    def slow(password: str) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        import time

        time.sleep(0.1)
        running -= 1
        return real(password)

    class Counting:
        hash = staticmethod(slow)

    passwords._hasher = Counting()  # type: ignore[assignment]
    results = await asyncio.gather(*(passwords.hash("p" * 12) for _ in range(6)), return_exceptions=True)
    assert most <= 2
    assert any(isinstance(r, Busy) for r in results) and any(isinstance(r, str) for r in results)
    passwords.close()


def test_weak_passwords_are_named() -> None:
    for password, code in [("short", "short"), ("x" * 1025, "long"), ("ayse@example.com", "email"), ("ayse", "short")]:
        with pytest.raises(WeakPassword) as caught:
            check_strength(password, email="ayse@example.com")
        assert caught.value.code == code
    with pytest.raises(WeakPassword):
        check_strength("ayseayse12"[:4] * 3, email="ayseayseayse@example.com")
    check_strength("a perfectly fine one", email="ayse@example.com")


def test_the_throttle_separates_pairs_addresses_and_clients() -> None:
    now = [0.0]
    t = SignInThrottle(per_pair=5, window=900, monotonic=lambda: now[0])
    assert all(t.sign_in("a@x.com", "1.1.1.1") for _ in range(5))
    assert not t.sign_in("a@x.com", "1.1.1.1")
    assert t.sign_in("A@X.com", "2.2.2.2")  # the owner, elsewhere
    t.signed_in("a@x.com", "2.2.2.2")
    now[0] += 901
    assert t.sign_in("a@x.com", "1.1.1.1")  # the window is over


def test_flooding_the_table_neither_grows_it_nor_frees_the_target() -> None:
    now = [0.0]
    t = Throttle(window=900, max_keys=100, monotonic=lambda: now[0])
    for _ in range(5):
        t.hit("victim", 5)
    for i in range(1000):
        t.hit(f"made-up-{i}", 5)
    assert len(t) <= 100
    assert not t.hit("victim", 5)
    now[0] += 901
    assert t.hit("new", 5) and t.hit("victim", 5)


def _request(remote: str, headers: dict | None = None, host: str = "llm.example.com"):
    request = make_mocked_request("GET", "/", headers={"Host": host, **(headers or {})})
    object.__setattr__(request, "_transport_peername", (remote, 1234))
    return request.clone(remote=remote)


def test_forwarded_headers_count_only_from_trusted_proxies() -> None:
    trusted = parse_networks(["10.0.0.0/8", "192.168.1.5"])
    fwd = {"X-Forwarded-For": "6.6.6.6, 203.0.113.9, 10.1.1.1", "X-Forwarded-Proto": "https",
           "X-Forwarded-Host": "llm.corp.example"}
    assert client_address(_request("10.0.0.2", fwd), trusted) == "203.0.113.9"
    assert is_secure(_request("10.0.0.2", fwd), trusted)
    assert public_base(_request("10.0.0.2", fwd), trusted) == "https://llm.corp.example"
    assert client_address(_request("198.51.100.1", fwd), trusted) == "198.51.100.1"
    assert not is_secure(_request("198.51.100.1", fwd), trusted)
    assert public_base(_request("198.51.100.1", fwd), trusted) == "http://llm.example.com"
    assert client_address(_request("10.0.0.2", {"X-Forwarded-For": "junk, 10.1.1.1"}), trusted) == "10.0.0.2"
    with pytest.raises(ValueError, match="trusted_proxies"):
        parse_networks(["not an address"])


@pytest.mark.parametrize(("given", "expected"), [
    ("/chat", "/chat"), ("/docs/x?y=1", "/docs/x?y=1"), ("//evil.com", "/account"), ("https://evil.com", "/account"),
    ("/\\evil.com", "/account"), ("", "/account"), (None, "/account"), ("/a\nb", "/account"),
])
def test_next_stays_on_this_site(given, expected) -> None:
    assert local_path(given) == expected


def test_editor_snippets() -> None:
    snippets = {s.id: s for s in editor_snippets("https://llm.example.com", "qwen", None, tools=True,
                                                 anthropic=True, responses=False)}
    assert list(snippets) == ["openai", "anthropic", "continue", "codex", "cline", "claude"]
    assert "OPENAI_BASE_URL=https://llm.example.com/v1" in snippets["openai"].text
    assert PLACEHOLDER in snippets["openai"].text
    assert "capabilities: [tool_use]" in snippets["continue"].text
    assert 'wire_api = "chat"' in snippets["codex"].text
    assert "ANTHROPIC_BASE_URL=https://llm.example.com\n" in snippets["claude"].text + "\n"
    plain = {s.id for s in editor_snippets("http://x", "m", "llmgw-k", tools=False, anthropic=False, responses=True)}
    assert plain == {"openai", "continue", "codex", "cline"}


def test_charts_escape_their_labels() -> None:
    svg = str(bar_chart([("<b>", 1.0), ("b", 3.0)], title="a & <t>"))
    assert svg.startswith("<svg") and "<b>" not in svg and "&lt;b&gt;" in svg and "a &amp; &lt;t&gt;" in svg
    assert svg.count("<rect") == 2
    assert "<rect" not in str(bar_chart([], title="empty"))
