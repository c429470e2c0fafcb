"""`llmgw ctl signin` through the test provider's device flow, and the admin API taking
the access token it got: for an admin (by the rules), not for anyone else."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestServer

from llmgw.admin import make_admin_app
from llmgw.config import parse_server_config
from llmgw.store import open_store

from .oidc_op import TestProvider

RULES = [{"claim": "groups", "contains": "llmgw-admins", "role": "admin"}]


@pytest.fixture
async def op():
    provider = TestProvider()
    await provider.start()
    provider.add_client("llmgw-cli", None, [])
    provider.people["ayse"] = {"email": "ayse@acme.com", "name": "Ayşe", "groups": ["llmgw-admins"]}
    provider.people["bo"] = {"email": "bo@acme.com", "name": "Bo", "groups": []}
    yield provider
    await provider.close()


@pytest.fixture
async def admin(op, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home-config"))
    monkeypatch.delenv("LLMGW_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("LLMGW_ADMIN_URL", raising=False)
    config = parse_server_config({
        "store": {"dsn": str(tmp_path / "a.db")},
        "admin_token_file": str(tmp_path / "no-such-token-file"),
        "auth": {"oidc": {"issuer": op.issuer, "client_id": "llmgw", "device_client_id": "llmgw-cli",
                          "redirect_url": "http://127.0.0.1:1/auth/callback", "rules": RULES}}})
    store = await open_store(config.store.dsn.reveal())
    for email in ("ayse@acme.com", "bo@acme.com"):
        await store.create_user(email, email.split("@")[0])
    server = TestServer(make_admin_app(config, store, token="the-admin-token"), host="127.0.0.1")
    await server.start_server()
    monkeypatch.setattr("llmgw.cli.ctl_client.default_token_file", lambda: str(tmp_path / "no-such-token-file"))
    yield str(server.make_url("")).rstrip("/"), store
    await server.close()
    await store.close()


async def _signin(op: TestProvider, url: str, username: str, capsys) -> tuple[int, str, str]:
    from llmgw.cli.main import main

    async def approve() -> None:
        while not op.devices:
            await asyncio.sleep(0.02)
        (device,) = op.devices.values()
        op.approve_device(device["user_code"], username)

    approving = asyncio.create_task(approve())
    code = await asyncio.to_thread(main, ["ctl", "signin", "--admin", url, "--issuer", op.issuer,
                                          "--client-id", "llmgw-cli"])
    await approving
    out, err = capsys.readouterr()
    return code, out, err


async def test_an_admin_signs_ctl_in_with_the_device_flow(op, admin, capsys, tmp_path):
    from llmgw.cli.main import main

    url, store = admin
    code, out, err = await _signin(op, url, "ayse", capsys)
    assert code == 0, err
    assert f"Open {op.issuer}/device and enter the code " in err and "signed in to" in out
    saved = tmp_path / "home-config" / "llmgw" / "oidc-tokens.json"
    assert (saved.stat().st_mode & 0o777) == 0o600 and url in json.loads(saved.read_text())

    # No admin token anywhere: ctl uses the sign-in, and the audit log names the person.
    code = await asyncio.to_thread(main, ["ctl", "orgs", "create", "acme", "--admin", url, "--actor", "someone"])
    assert code in (0, None), capsys.readouterr().err
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["ctl", "audit", "--action", "org.create", "--json", "--admin", url])
    assert code in (0, None)
    assert '"actor": "ayse@acme.com"' in capsys.readouterr().out

    assert await asyncio.to_thread(main, ["ctl", "signout", "--admin", url]) == 0
    assert url not in json.loads(saved.read_text())


async def test_someone_without_the_admin_role_is_refused(op, admin, capsys, tmp_path):
    url, _ = admin
    code, out, err = await _signin(op, url, "bo", capsys)
    assert code == 2 and "the admin API is for the admin staff role" in err
    assert not (tmp_path / "home-config" / "llmgw" / "oidc-tokens.json").exists()


async def test_a_made_up_bearer_is_refused(admin):
    import aiohttp

    url, _ = admin
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/api/v1/orgs", headers={"Authorization": "Bearer made-up"}) as r:
            assert r.status == 401 and "llmgw ctl signin" in (await r.json())["error"]




async def test_the_console_without_a_token_signs_in_through_the_provider(op, admin, capsys, tmp_path, monkeypatch):
    import argparse

    from llmgw.cli import console_cmd
    from llmgw.cli.ctl_client import AdminClient, CtlError

    url, _ = admin
    server_yaml = tmp_path / "server.yaml"
    server_yaml.write_text(f"auth:\n  oidc:\n    issuer: {op.issuer}\n    client_id: llmgw\n"
                           f"    device_client_id: llmgw-cli\n    redirect_url: http://127.0.0.1:1/auth/callback\n")
    monkeypatch.setenv("LLMGW_CONFIG", str(server_yaml))
    args = argparse.Namespace(admin=url, token_file=None, actor=None)
    with pytest.raises(CtlError) as no_token:
        AdminClient.from_args(args)
    assert "llmgw ctl signin" in no_token.value.message

    async def approve() -> None:
        while not op.devices:
            await asyncio.sleep(0.02)
        (device,) = op.devices.values()
        op.approve_device(device["user_code"], "ayse")

    approving = asyncio.create_task(approve())
    signed = await asyncio.to_thread(console_cmd._signed_in_through_the_provider, args, no_token.value)
    await approving
    assert signed, capsys.readouterr().err
    client = AdminClient.from_args(args)
    assert isinstance(await asyncio.to_thread(client.get, "/orgs"), (dict, list))


async def test_ctl_at_a_terminal_without_a_token_signs_in_first(op, admin, capsys, tmp_path, monkeypatch):
    from llmgw.cli.main import main

    url, _ = admin
    server_yaml = tmp_path / "server.yaml"
    server_yaml.write_text(f"auth:\n  oidc:\n    issuer: {op.issuer}\n    client_id: llmgw\n"
                           f"    device_client_id: llmgw-cli\n    redirect_url: http://127.0.0.1:1/auth/callback\n")
    monkeypatch.setenv("LLMGW_CONFIG", str(server_yaml))

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())

    async def approve() -> None:
        while not op.devices:
            await asyncio.sleep(0.02)
        (device,) = op.devices.values()
        op.approve_device(device["user_code"], "ayse")

    approving = asyncio.create_task(approve())
    code = await asyncio.to_thread(main, ["ctl", "orgs", "list", "--admin", url, "--json"])
    await approving
    out, err = capsys.readouterr()
    assert code in (0, None), err
    assert "no admin token here; signing in through the single sign-on provider" in err
    # Without a terminal (a script), no sign-in is tried: the refusal says what to do.
    monkeypatch.setattr("sys.stdin", type("Pipe", (), {"isatty": lambda self: False})())
    (tmp_path / "home-config" / "llmgw" / "oidc-tokens.json").unlink()
    assert await asyncio.to_thread(main, ["ctl", "orgs", "list", "--admin", url]) == 2
    assert "llmgw ctl signin" in capsys.readouterr().err
