"""Signing in to the portal through an OpenID Connect provider (the test provider on authlib)."""

from __future__ import annotations

import time

import pytest
from joserfc.jwk import RSAKey

from auth.oidc_op import TestProvider, signing_key

from .conftest import stop_site
from .sso_site import sign_in_through, start_sso_site


@pytest.fixture
async def op():
    provider = TestProvider()
    await provider.start()
    provider.people["ayse"] = {"email": "ayse@acme.com", "name": "Ayşe Yılmaz", "email_verified": True,
                               "groups": ["staff", "llmgw-admins"]}
    provider.people["bo"] = {"email": "bo@elsewhere.org", "name": "Bo", "groups": ["staff"]}
    yield provider
    await provider.close()


@pytest.fixture
async def sso(engine, tmp_path, op):
    site = await start_sso_site(engine, str(tmp_path / "sso.db"), op)
    yield site
    await stop_site(site)


async def test_sign_in_page_offers_the_provider(sso):
    browser = await sso.browser()
    page = await browser.get("/signin")
    assert "Sign in with Test IdP" in page.text
    assert 'href="/auth/oidc?next=/account"' in page.text


async def test_sign_in_makes_the_account_with_the_mapped_role_and_org(sso):
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 200 and page.url.endswith("/account"), page.text
    assert "Ayşe Yılmaz" in page.text and "ayse@acme.com" in page.text
    user = await sso.store.get_user_by_email("ayse@acme.com")
    assert user.role == "admin" and user.state == "active" and user.password_hash is None
    acme = await sso.store.get_org_by_name("acme")
    memberships = await sso.store.list_memberships(user_id=user.id)
    assert ("org", acme.id) in {(m.scope_kind, m.scope_id) for m in memberships}
    # The same session a password sign-in opens: /admin is open to an admin.
    assert (await browser.get("/admin")).status == 200
    # The pending cookie is gone: the state is used once.
    assert browser.cookie("llmgw_oidc") in (None, "")


async def test_roles_follow_the_provider_at_each_sign_in(sso, op):
    browser = await sso.browser()
    await sign_in_through(browser, "ayse")
    op.people["ayse"]["groups"] = ["staff"]
    again = await sso.browser()
    page = await sign_in_through(again, "ayse")
    assert page.status == 200
    assert (await sso.store.get_user_by_email("ayse@acme.com")).role == "none"
    assert (await again.get("/admin")).status == 403


async def test_a_person_outside_the_rules_gets_no_role_and_no_org(sso):
    browser = await sso.browser()
    page = await sign_in_through(browser, "bo")
    assert page.status == 200
    user = await sso.store.get_user_by_email("bo@elsewhere.org")
    assert user.role == "none"
    assert await sso.store.list_memberships(user_id=user.id) == []


async def test_a_suspended_person_is_refused(sso):
    browser = await sso.browser()
    await sign_in_through(browser, "ayse")
    await sso.portal.tenancy("test").set_user_state("ayse@acme.com", "suspended")
    again = await sso.browser()
    page = await sign_in_through(again, "ayse")
    assert page.status == 403 and "suspended" in page.text
    assert again.cookie("llmgw_session") is None


@pytest.mark.parametrize("changes, reason", [
    ({"aud": ["someone-else"]}, "aud claim"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "expired"),
    ({"iss": "http://evil.example"}, "iss claim"),
    ({"nonce": "not-the-one-sent"}, "nonce"),
])
async def test_a_wrong_id_token_is_refused(sso, op, changes, reason):
    op.id_token_changes = changes
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 401, page.text
    assert reason in page.text
    assert browser.cookie("llmgw_session") is None
    assert await sso.store.get_user_by_email("ayse@acme.com") is None


async def test_a_token_signed_by_another_key_is_refused(sso, op):
    other = signing_key(99)  # a key of the right shape that the provider does not publish
    op.foreign_key = RSAKey.import_key(other.as_dict(private=True) | {"kid": op.key.kid})
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 401 and "signature" in page.text


async def test_a_rotated_key_is_fetched_when_a_token_names_it(sso, op):
    from llmgw.web.pages_sso import PROVIDER

    browser = await sso.browser()
    assert (await sign_in_through(browser, "ayse")).status == 200
    sso.app[PROVIDER].jwks_min_interval = 0  # the flood guard waits 10 s between fetches
    op.rotate()
    again = await sso.browser()
    page = await sign_in_through(again, "ayse")
    assert page.status == 200 and page.url.endswith("/account")


async def test_a_callback_with_another_browsers_state_is_refused(sso):
    browser = await sso.browser()
    page = await browser.get("/auth/callback?code=x&state=made-up")
    assert page.status == 400 and "another browser" in page.text


async def test_a_skewed_clock_within_the_allowance_is_accepted(sso, op):
    # Issued 30 s "in the future" by the provider's clock: inside the 60 s allowed.
    op.id_token_changes = {"iat": int(time.time()) + 30, "exp": int(time.time()) + 330}
    browser = await sso.browser()
    assert (await sign_in_through(browser, "ayse")).status == 200


async def test_a_token_naming_a_key_the_provider_does_not_publish_is_refused(sso, op):
    from llmgw.web.pages_sso import PROVIDER

    sso.app[PROVIDER].jwks_min_interval = 0
    op.foreign_key = RSAKey.import_key(signing_key(99).as_dict(private=True) | {"kid": "not-published"})
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 401 and "does not publish" in page.text


async def test_no_passwords_with_a_provider_that_cannot_be_read_refuses_to_start(engine, tmp_path):
    from aiohttp.test_utils import TestServer

    from llmgw.auth.oidc import OIDCError
    from llmgw.server import make_gateway_app

    from .conftest import site_config
    from .sso_site import free_port

    config = site_config(engine, str(tmp_path / "x.db"), auth={"oidc": {
        "issuer": f"http://127.0.0.1:{free_port()}", "client_id": "llmgw", "no_passwords": True,
        "redirect_url": "http://127.0.0.1:1/auth/callback"}})
    server = TestServer(make_gateway_app(config), host="127.0.0.1")
    with pytest.raises(OIDCError, match="no_passwords is true, but the provider's discovery document .* "
                                        "cannot be read.*nobody could sign in"):
        await server.start_server()
    await server.close()


async def test_no_passwords_signs_in_through_the_provider_only(engine, tmp_path, op):
    site = await start_sso_site(engine, str(tmp_path / "np.db"), op, oidc={"no_passwords": True})
    try:
        browser = await site.browser()
        page = await browser.get("/signin")
        assert "Sign in with Test IdP" in page.text and 'name="password"' not in page.text
        assert (await sign_in_through(browser, "ayse")).status == 200
    finally:
        await stop_site(site)


async def test_an_unverified_address_is_refused(sso, op):
    op.people["ayse"]["email_verified"] = False
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 401 and "not verified" in page.text
    assert await sso.store.get_user_by_email("ayse@acme.com") is None


async def test_a_rules_organization_is_made_when_missing(engine, tmp_path, op):
    rules = [{"claim": "email", "suffix": "@acme.com", "org": "newco"}]
    site = await start_sso_site(engine, str(tmp_path / "org.db"), op, oidc={"rules": rules})
    try:
        assert (await sign_in_through(await site.browser(), "ayse")).status == 200
        newco = await site.store.get_org_by_name("newco")
        user = await site.store.get_user_by_email("ayse@acme.com")
        assert newco is not None and user.role == "none"  # no rule gives roles: left as it is
        assert ("org", newco.id) in {(m.scope_kind, m.scope_id)
                                     for m in await site.store.list_memberships(user_id=user.id)}
    finally:
        await stop_site(site)


async def test_an_account_waiting_for_approval_is_refused(sso):
    await sso.portal.tenancy("test").create_user("ayse@acme.com", "Ayşe", state="pending")
    browser = await sso.browser()
    page = await sign_in_through(browser, "ayse")
    assert page.status == 403 and "approval" in page.text


async def test_the_session_and_its_csrf_token_are_new_after_sign_in(sso):
    browser = await sso.browser()
    before = (await browser.get("/signin")).csrf
    await sign_in_through(browser, "ayse")
    after = (await browser.get("/account")).csrf
    assert after != before and browser.cookie("llmgw_session")
