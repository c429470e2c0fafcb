"""/admin/people: forgetting a person from the portal, their email typed back; the report in the page's language."""

from __future__ import annotations

import datetime as dt
import json

from .conftest import Site


async def _admin(site: Site):
    await site.person("root@example.com", role="admin", project=None)
    b = await site.browser("192.0.2.40")
    await b.sign_in("root@example.com")
    return b


async def test_an_admin_forgets_a_person_after_typing_their_email(site: Site) -> None:
    ayse = await site.person()
    them = await site.browser("192.0.2.41")
    await them.sign_in("ayse@example.com")
    assert (await them.get("/account")).status == 200
    admin = await _admin(site)
    page = await admin.get("/admin/people")
    assert 'value="forget"' in page.text

    wrong = await admin.post(f"/admin/people/{ayse.id}", {"csrf": page.csrf, "action": "forget",
                                                          "confirm": "someone@example.com"})
    assert wrong.status == 400 and "type their email exactly" in wrong.text
    assert (await site.store.get_user(ayse.id)).email == "ayse@example.com"

    done = await admin.post(f"/admin/people/{ayse.id}", {"csrf": page.csrf, "action": "forget",
                                                         "confirm": "Ayse@Example.com"})
    assert done.status == 200 and "Their usage is kept as forgotten-" in done.text
    assert "memberships: 1" in done.text and "portal sessions ended: 1" in done.text
    gone = await site.store.get_user(ayse.id)
    assert gone.email.endswith("@forgotten.invalid")
    assert (await them.get("/account")).url.endswith("/signin?next=/account")  # signed out
    events = await site.store.list_audit(limit=200)
    assert "ayse@example.com" not in json.dumps([e.detail for e in events] + [e.target for e in events])
    (event,) = [e for e in events if e.action == "users.forget"]
    assert event.actor == "root@example.com" and event.detail["via"] == "portal"

    listed = await admin.get("/admin/people")
    assert "ayse@example.com" not in listed.text
    again = await admin.post(f"/admin/people/{ayse.id}", {"csrf": listed.csrf, "action": "forget",
                                                          "confirm": gone.email})
    assert "Nothing is kept about this person any more" in again.text


async def test_the_report_is_in_turkish_on_a_turkish_page(site: Site) -> None:
    ayse = await site.person()
    await site.person("root@example.com", role="admin", project=None)
    admin = await site.browser("192.0.2.42", lang="tr")
    await admin.sign_in("root@example.com")
    page = await admin.get("/admin/people")
    done = await admin.post(f"/admin/people/{ayse.id}", {"csrf": page.csrf, "action": "forget",
                                                         "confirm": "ayse@example.com"})
    assert "Kullanımı forgotten-" in done.text and "üyelikler: 1" in done.text


async def test_the_account_page_refuses_a_key_longer_than_its_projects_cap_naming_it(site: Site) -> None:
    await site.person()
    tenancy = site.portal.tenancy("test")
    await tenancy.set_key_lifetime("acme/search", dt.timedelta(days=7))
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    project_id = (await tenancy.find("acme/search/indexer")).id
    refused = await b.submit("/account", "/account/keys", {"name": "laptop", "project": project_id, "days": "30"})
    assert refused.status == 400 and "at most 168h, set by team acme/search" in refused.text
    made = await b.submit("/account", "/account/keys", {"name": "laptop", "project": project_id})
    assert made.status == 200
    (key,) = await site.store.list_keys(project_id=project_id)
    assert abs((key.expires_at - key.created_at) - dt.timedelta(days=7)) < dt.timedelta(seconds=5)
