"""The safe fetcher: no loopback, private, link-local or embedded-private addresses, no sneaky redirects."""

from __future__ import annotations

import socket

import pytest

from llmgw.mirror.safefetch import BlockedAddress, SafeFetcher, _CheckingResolver, check_url, forbidden_reason


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
    "224.0.0.1", "::1", "fe80::1", "fc00::1", "::",
    "::ffff:10.0.0.1",  # IPv4-mapped
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2002:c0a8:0101::",  # 6to4 of 192.168.1.1
])
def test_private_addresses_are_forbidden(address):
    assert forbidden_reason(address) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808",
                                     "2002:0808:0808::1"])
def test_public_addresses_are_allowed(address):
    assert forbidden_reason(address) is None


def test_urls_are_checked():
    for url in ("file:///etc/passwd", "ftp://example.com/x", "http://user:pw@example.com/x",
                "http://127.0.0.1:8080/x", "http://[::1]/x", "http://localhost/x", "http://169.254.169.254/latest",
                "http://[64:ff9b::a9fe:a9fe]/x"):
        with pytest.raises(BlockedAddress):
            check_url(url, allow_private=False)
    assert check_url("https://huggingface.co/x", allow_private=False).host == "huggingface.co"
    assert check_url("http://127.0.0.1:8080/x", allow_private=True).port == 8080


class StubResolver:
    def __init__(self, addresses):
        self.addresses = addresses

    async def resolve(self, host, port=0, family=socket.AF_INET):
        return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0, "flags": 0}
                for a in self.addresses]

    async def close(self):
        pass


async def test_a_name_that_resolves_inward_is_refused():
    with pytest.raises(BlockedAddress, match="resolves only"):
        await _CheckingResolver(StubResolver(["10.0.0.5", "127.0.0.1"])).resolve("evil.example", 80)
    kept = await _CheckingResolver(StubResolver(["10.0.0.5", "93.184.216.34"])).resolve("mixed.example", 80)
    assert [r["host"] for r in kept] == ["93.184.216.34"]


async def test_the_fetcher_refuses_loopback_without_allow_private(registry):
    async with SafeFetcher() as safe:
        with pytest.raises(BlockedAddress):
            async with safe.get(f"{registry.base}/api/models"):
                pass
        with pytest.raises(BlockedAddress):
            # `localhost` is a name: refused whether by the literal check or when its addresses are resolved
            async with safe.get(registry.base.replace("127.0.0.1", "localhost") + "/api/models"):
                pass
    assert registry.requests == []


async def test_redirects_are_followed_without_the_token_on_another_host(registry):
    registry.redirect_files = True
    async with SafeFetcher(allow_private=True) as safe:
        async with safe.get(f"{registry.base}/acme/tiny-GGUF/resolve/main/config.json",
                            {"Authorization": "Bearer t"}) as response:
            assert response.status == 200
    assert [r["kind"] for r in registry.requests] == ["file", "cdn"]
    assert registry.requests[0]["authorization"] == "Bearer t"
    assert registry.requests[1]["authorization"] is None


async def test_a_redirect_inward_is_refused(registry, monkeypatch):
    # Pretend the fake registry's 127.0.0.1 is a public address; its redirect to `localhost` must still be refused.
    from llmgw.mirror import safefetch

    real = safefetch.forbidden_reason
    monkeypatch.setattr(safefetch, "forbidden_reason", lambda a: None if a == "127.0.0.1" else real(a))
    registry.redirect_files = True
    async with SafeFetcher() as safe:
        with pytest.raises(BlockedAddress, match="localhost"):
            async with safe.get(f"{registry.base}/acme/tiny-GGUF/resolve/main/config.json"):
                pass
    assert [r["kind"] for r in registry.requests] == ["file"]
