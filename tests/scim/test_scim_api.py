"""/scim/v2 as an identity provider uses it: the token, Users and Groups, filters,
pages, PATCH as Entra ID and Okta send it, ETags, and a suspended person's key
refused at once on this control plane and within a second on another."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from llmgw.server import make_gateway_app
from llmgw.web.portal import PORTAL

from .conftest import scim_config

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


async def call(http, site, method, path, body=None, headers=None):
    async with http.request(method, site.scim + path, json=body, headers={**site.headers, **(headers or {})}) as r:
        text = await r.text()
        return r.status, (await r.json(content_type=None) if text else None), r.headers


async def make_user(http, site, email, name=None, **extra):
    body = {"schemas": [USER], "userName": email, "active": True, **extra}
    if name:
        body["displayName"] = name
    status, user, _ = await call(http, site, "POST", "/Users", body)
    assert status == 201, user
    return user


async def chat(http, url, secret):
    async with http.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {secret}"},
                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}) as r:
        await r.read()
        return r.status


async def test_users_and_groups_need_the_organizations_token(scim_site, http):
    async with http.get(scim_site.scim + "/Users") as r:
        assert r.status == 401 and "llmgw org scim-token" in (await r.json(content_type=None))["detail"]
        assert r.headers["Content-Type"].startswith("application/scim+json")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    async with http.get(scim_site.scim + "/Users", headers={"Authorization": "Bearer llmgw-scim-nope"}) as r:
        assert r.status == 401
    async with http.get(scim_site.scim + "/ServiceProviderConfig") as r:
        assert r.status == 200 and (await r.json(content_type=None))["patch"]["supported"] is True


async def test_create_read_filter_and_page_users(scim_site, http):
    for i, (email, name) in enumerate([("ada@acme.com", "Ada Lovelace"), ("alan@acme.com", "Alan Turing"),
                                       ("grace@navy.mil", "Grace Hopper")]):
        user = await make_user(http, scim_site, email, name, externalId=f"okta-{i}")
    assert user["userName"] == "grace@navy.mil" and user["active"] is True and user["externalId"] == "okta-2"
    status, again, _ = await call(http, scim_site, "POST", "/Users", {"schemas": [USER], "userName": "ADA@acme.com"})
    assert status == 409 and again["scimType"] == "uniqueness"

    async def names(query):
        status, body, _ = await call(http, scim_site, "GET", "/Users?" + query)
        assert status == 200, body
        return body["totalResults"], [r["userName"] for r in body["Resources"]]

    assert await names('filter=userName eq "alan@acme.com"') == (1, ["alan@acme.com"])
    assert await names('filter=userName sw "a" and displayName co "tur"') == (1, ["alan@acme.com"])
    assert await names('filter=userName ew "navy.mil" or externalId eq "okta-0"') == (2, ["ada@acme.com",
                                                                                        "grace@navy.mil"])
    assert await names('filter=not (userName co "acme") and active eq true') == (1, ["grace@navy.mil"])
    assert await names("startIndex=2&count=1") == (3, ["alan@acme.com"])
    status, body, _ = await call(http, scim_site, "GET", '/Users?filter=userName zz "x"')
    assert status == 400 and body["scimType"] == "invalidFilter"
    status, body, _ = await call(http, scim_site, "POST", "/Users", {"schemas": [USER], "userName": "not-an-address"})
    assert status == 400 and "userName" in body["detail"]


async def test_suspending_through_scim_stops_the_persons_key_on_every_control_plane(scim_site, http, tmp_path):
    user = await make_user(http, scim_site, "ada@acme.com", "Ada")
    issued = await scim_site.server.app[PORTAL].tenancy("test").create_key(user="ada@acme.com", name="laptop")
    other = TestServer(make_gateway_app(scim_config(scim_site.engine_url, str(tmp_path / "scim.db"))), host="127.0.0.1")
    await other.start_server()
    try:
        other_url = str(other.make_url("")).rstrip("/")
        assert await chat(http, scim_site.url, issued.secret) == 200
        assert await chat(http, other_url, issued.secret) == 200  # both caches now hold the key
        # Entra ID's way: op Replace, the boolean as text.
        status, body, _ = await call(http, scim_site, "PATCH", f"/Users/{user['id']}", {
            "schemas": [PATCH], "Operations": [{"op": "Replace", "path": "active", "value": "False"}]})
        assert status == 200 and body["active"] is False
        changed = time.monotonic()
        assert await chat(http, scim_site.url, issued.secret) == 403
        while await chat(http, other_url, issued.secret) != 403:
            assert time.monotonic() - changed < 1.0, "the other control plane still takes the key after 1 s"
            await asyncio.sleep(0.05)
        # Okta's way back: a PUT with active true.
        status, body, _ = await call(http, scim_site, "PUT", f"/Users/{user['id']}",
                                     {"schemas": [USER], "userName": "ada@acme.com", "displayName": "Ada",
                                      "active": True})
        assert status == 200 and body["active"] is True
        assert await chat(http, scim_site.url, issued.secret) == 200
    finally:
        await other.close()


async def test_deleting_a_user_forgets_the_person(scim_site, http):
    user = await make_user(http, scim_site, "ada@acme.com", "Ada Lovelace")
    issued = await scim_site.server.app[PORTAL].tenancy("test").create_key(user="ada@acme.com")
    assert await chat(http, scim_site.url, issued.secret) == 200
    status, _, _ = await call(http, scim_site, "DELETE", f"/Users/{user['id']}")
    assert status == 204
    assert await chat(http, scim_site.url, issued.secret) in (401, 403)
    assert (await call(http, scim_site, "GET", f"/Users/{user['id']}"))[0] == 404
    assert await scim_site.store.get_user_by_email("ada@acme.com") is None
    assert (await call(http, scim_site, "GET", "/Users"))[1]["totalResults"] == 0


async def test_groups_are_teams_with_members(scim_site, http):
    ada = await make_user(http, scim_site, "ada@acme.com", "Ada")
    alan = await make_user(http, scim_site, "alan@acme.com", "Alan")
    status, group, _ = await call(http, scim_site, "POST", "/Groups", {
        "schemas": [GROUP], "displayName": "search", "members": [{"value": ada["id"]}]})
    assert status == 201, group
    assert await scim_site.store.get_team_by_name((await scim_site.store.get_org_by_name("acme")).id, "search")
    gid = group["id"]
    # Okta adds members with a path, Entra ID removes them with a value list.
    status, group, _ = await call(http, scim_site, "PATCH", f"/Groups/{gid}", {
        "schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": [{"value": alan["id"]}]}]})
    assert status == 200 and {m["value"] for m in group["members"]} == {ada["id"], alan["id"]}
    status, body, _ = await call(http, scim_site, "GET", f"/Users/{alan['id']}")
    assert [g["display"] for g in body["groups"]] == ["search"]
    status, group, _ = await call(http, scim_site, "PATCH", f"/Groups/{gid}", {
        "schemas": [PATCH], "Operations": [{"op": "remove", "path": f'members[value eq "{ada["id"]}"]'}]})
    assert status == 200 and [m["value"] for m in group["members"]] == [alan["id"]]
    status, group, _ = await call(http, scim_site, "PATCH", f"/Groups/{gid}", {
        "schemas": [PATCH], "Operations": [{"op": "Remove", "path": "members", "value": [{"value": alan["id"]}]},
                                          {"op": "replace", "value": {"displayName": "research"}}]})
    assert status == 200 and "members" not in group and group["displayName"] == "research"
    status, body, _ = await call(http, scim_site, "GET", '/Groups?filter=displayName eq "research"')
    assert body["totalResults"] == 1
    status, body, _ = await call(http, scim_site, "POST", "/Groups", {
        "schemas": [GROUP], "displayName": "x", "members": [{"value": "usr-nobody"}]})
    assert status == 400 and "members[0].value" in body["detail"]
    assert (await call(http, scim_site, "DELETE", f"/Groups/{gid}"))[0] == 204
    assert (await call(http, scim_site, "GET", f"/Groups/{gid}"))[0] == 404


async def test_an_etag_that_moved_on_refuses_the_change(scim_site, http):
    user = await make_user(http, scim_site, "ada@acme.com", "Ada")
    status, body, headers = await call(http, scim_site, "GET", f"/Users/{user['id']}")
    etag = headers["ETag"]
    assert etag == body["meta"]["version"]
    assert (await call(http, scim_site, "GET", f"/Users/{user['id']}", headers={"If-None-Match": etag}))[0] == 304
    change = {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "displayName", "value": "Ada L."}]}
    assert (await call(http, scim_site, "PATCH", f"/Users/{user['id']}", change, {"If-Match": etag}))[0] == 200
    status, body, _ = await call(http, scim_site, "PATCH", f"/Users/{user['id']}", change, {"If-Match": etag})
    assert status == 412


async def test_another_organizations_people_are_out_of_reach(scim_site, http):
    from llmgw.scim import tokens

    user = await make_user(http, scim_site, "ada@acme.com", "Ada")
    tenancy = scim_site.server.app[PORTAL].tenancy("test")
    globex = await tenancy.create("globex")
    theirs = await tokens.issue(scim_site.store, globex.id, actor="test")
    async with http.get(scim_site.scim + f"/Users/{user['id']}", headers={"Authorization": f"Bearer {theirs}"}) as r:
        assert r.status == 404
    async with http.get(scim_site.scim + "/Users", headers={"Authorization": f"Bearer {theirs}"}) as r:
        assert (await r.json(content_type=None))["totalResults"] == 0


def test_org_scim_token_prints_a_token_that_works(tmp_path, capsys):
    from llmgw.cli.main import main

    db = str(tmp_path / "cli.db")
    assert main(["org", "create", "acme", "--store", db]) in (0, None)
    capsys.readouterr()
    assert main(["org", "scim-token", "acme", "--store", db]) in (0, None)
    out, err = capsys.readouterr()
    token = out.strip()
    assert token.startswith("llmgw-scim-") and "not shown again" in err

    async def org_of():
        from llmgw.scim import tokens
        from llmgw.store import open_store

        store = await open_store(db)
        try:
            return await tokens.org_of(store, token)
        finally:
            await store.close()

    assert asyncio.run(org_of())
    assert main(["org", "scim-token", "acme", "--revoke", "--store", db]) in (0, None)
    assert "removed" in capsys.readouterr().out
    assert asyncio.run(org_of()) is None


async def test_a_group_holding_projects_is_not_removed(scim_site, http):
    status, group, _ = await call(http, scim_site, "POST", "/Groups", {"schemas": [GROUP], "displayName": "search"})
    await scim_site.server.app[PORTAL].tenancy("test").create("acme/search/indexer")
    status, body, _ = await call(http, scim_site, "DELETE", f"/Groups/{group['id']}")
    assert status == 409 and "cannot be removed" in body["detail"]
    assert (await call(http, scim_site, "GET", f"/Groups/{group['id']}"))[0] == 200


async def test_a_person_of_another_organization_is_not_taken_over(scim_site, http):
    tenancy = scim_site.server.app[PORTAL].tenancy("test")
    await tenancy.create("globex")
    await tenancy.create_user("wile@globex.com", "Wile")
    await tenancy.add_member("wile@globex.com", "globex")
    await tenancy.create_user("new@acme.com", "New")  # an account in no organization yet (a first sign-in)
    status, body, _ = await call(http, scim_site, "POST", "/Users", {"schemas": [USER], "userName": "wile@globex.com"})
    assert status == 409 and "another organization" in body["detail"]
    assert (await scim_site.store.get_user_by_email("wile@globex.com")).state == "active"
    status, body, _ = await call(http, scim_site, "POST", "/Users", {"schemas": [USER], "userName": "new@acme.com"})
    assert status == 201 and body["userName"] == "new@acme.com"


async def test_llmgw_users_suspend_reaches_every_gateway_within_a_second(scim_site, http, tmp_path):
    from llmgw.cli.main import main

    await make_user(http, scim_site, "ada@acme.com", "Ada")
    issued = await scim_site.server.app[PORTAL].tenancy("test").create_key(user="ada@acme.com")
    assert await chat(http, scim_site.url, issued.secret) == 200  # cached now
    db = str(tmp_path / "scim.db")
    # Another process changes the store: no gateway's cache is told directly.
    assert await asyncio.to_thread(main, ["users", "suspend", "ada@acme.com", "--store", db]) in (0, None)
    changed = time.monotonic()
    while await chat(http, scim_site.url, issued.secret) != 403:
        assert time.monotonic() - changed < 1.0, "the gateway still takes the key after 1 s"
        await asyncio.sleep(0.05)
