"""What a request must be before any handler sees it: Host, cross-site, token, content type, actor."""

from __future__ import annotations

import os
import stat

import pytest

from llmgw.admin import AdminListenError, admin_address, ensure_token, read_token
from llmgw.admin.token import TokenFileError
from llmgw.config.server import ServerConfig

from .conftest import AUTH, JSON


async def test_a_dns_name_in_host_is_refused_before_the_token_is_looked_at(bare):
    error = await bare.refused("GET", "/summary", headers={**JSON, "Host": "cp.example.com:9090"}, status=403)
    assert "'cp.example.com:9090' is a name" in error and "127.0.0.1" in error
    # Even without a token: the name is refused first.
    await bare.refused("GET", "/summary", headers={"Host": "evil.example"}, status=403)


@pytest.mark.parametrize("host", ["127.0.0.1:9090", "localhost:9090", "[::1]:9090", "10.0.0.5", "LOCALHOST"])
async def test_an_address_or_localhost_in_host_is_served(bare, host):
    await bare.call("GET", "/summary", headers={**JSON, "Host": host})


async def test_a_form_post_is_refused_and_recorded(bare):
    for content_type in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"):
        error = await bare.refused("PUT", "/settings/guard.mode", data=b"value=off",
                                   headers={**AUTH, "Content-Type": content_type}, status=415)
        assert "application/json" in error
    # A DELETE must say it too.
    await bare.refused("DELETE", "/settings/guard.mode", headers=AUTH, status=415)
    events = await bare.store.list_audit(action="settings.*")
    assert events and all(e.detail["outcome"] == "refused" and e.detail["status"] == 415 for e in events)
    assert (await bare.store.get_setting("guard.mode")) is None


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "http://127.0.0.1:8080"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
])
async def test_a_cross_site_request_is_refused(bare, headers):
    error = await bare.refused("PUT", "/settings/guard.mode", {"value": "off"}, headers={**JSON, **headers},
                               status=403)
    assert "another site" in error
    assert (await bare.store.get_setting("guard.mode")) is None


async def test_a_same_origin_request_is_served(bare):
    host = f"127.0.0.1:{bare.client.port}"
    await bare.call("GET", "/summary", headers={**JSON, "Host": host, "Origin": f"http://{host}",
                                                 "Sec-Fetch-Site": "same-origin"})


async def test_a_missing_or_wrong_token_is_401(bare):
    resp = await bare.client.get("/api/v1/summary")
    assert resp.status == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert "no admin token" in (await resp.json())["error"]
    error = await bare.refused("GET", "/summary", headers={"Authorization": "Bearer nope"}, status=401)
    assert "wrong" in error
    await bare.refused("GET", "/summary", headers={"Authorization": "Basic dXNlcjpwYXNz"}, status=401)
    # Unknown paths under /api want the token too: nothing is learnt without it.
    await bare.refused("GET", "/nope", headers={}, status=401)


async def test_the_actor_comes_from_its_header_and_is_checked(bare):
    await bare.call("PUT", "/settings/guard.mode", {"value": "shadow"}, headers={**JSON, "X-Llmgw-Actor": "ci@deploy"})
    assert (await bare.store.get_setting("guard.mode")).actor == "ci@deploy"
    for bad in ("has space", "x" * 65, "semi;colon", ""):
        error = await bare.refused("PUT", "/settings/guard.mode", {"value": "off"},
                                   headers={**JSON, "X-Llmgw-Actor": bad}, status=400)
        assert "X-Llmgw-Actor" in error
    assert (await bare.store.get_setting("guard.mode")).value == "shadow"
    await bare.call("PUT", "/settings/guard.mode", {"value": "off"})
    assert (await bare.store.get_setting("guard.mode")).actor == "unknown"


async def test_via_must_be_a_known_client(bare):
    error = await bare.refused("GET", "/summary", headers={**JSON, "X-Llmgw-Via": "telnet"}, status=400)
    assert "api, ctl, console, portal, cli" in error


async def test_unknown_paths_and_methods_answer_json(bare):
    assert "openapi.json" in await bare.refused("GET", "/nope", status=404)
    error = await bare.refused("PATCH", "/summary", status=405)
    assert "GET" in error


async def test_a_malformed_body_is_a_400_naming_the_problem(admin):
    error = await admin.refused("POST", "/models/qwen-small/scale", data=b"{not json", status=400)
    assert error.startswith("body: not JSON")
    error = await admin.refused("POST", "/models/qwen-small/scale", {"min": "two", "maxx": 3}, status=400)
    assert "min: expected an integer, got 'two'" in error and "maxx: unknown field (did you mean 'max'?)" in error
    error = await admin.refused("POST", "/models/qwen-small/scale", [1, 2], status=400)
    assert "expected a JSON object" in error


def test_the_token_file_is_made_0600_once_and_reused(tmp_path):
    path = tmp_path / "secrets" / "admin-token"
    token = ensure_token(path)
    assert len(token) >= 40
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert ensure_token(path) == token == read_token(path)
    os.chmod(path, 0o644)
    assert ensure_token(path) == token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(TokenFileError, match="does not exist"):
        read_token(tmp_path / "none")


async def test_the_app_reads_its_token_file_at_start(aiohttp_client, store, tmp_path):
    from llmgw.admin import make_admin_app

    config = ServerConfig(admin_token_file=str(tmp_path / "admin-token"))
    client = await aiohttp_client(make_admin_app(config, store))
    token = read_token(tmp_path / "admin-token")
    resp = await client.get("/api/v1/summary", headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200


def test_admin_listen_off_loopback_needs_admin_remote():
    assert admin_address(ServerConfig()) == ("127.0.0.1", 9090)
    with pytest.raises(AdminListenError, match="admin_remote: true"):
        admin_address(ServerConfig(admin_listen="10.0.0.5:9090"))
    assert admin_address(ServerConfig(admin_listen="10.0.0.5:9090", admin_remote=True)) == ("10.0.0.5", 9090)
