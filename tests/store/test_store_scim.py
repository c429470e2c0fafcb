"""What SCIM keeps in the store, on both backends: a person's name and address changed,
and the externalIds an organization's SCIM client gives its people and teams."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Invalid, NotFound


async def test_a_persons_name_and_address_change(store):
    ada = await store.create_user("ada@acme.com", "Ada")
    await store.create_user("alan@acme.com", "Alan")
    assert (await store.set_user_name(ada.id, "  Ada Lovelace ")).name == "Ada Lovelace"
    moved = await store.set_user_email(ada.id, "Ada.Lovelace@acme.com")
    assert moved.email == "ada.lovelace@acme.com"
    assert (await store.get_user_by_email("ada.lovelace@acme.com")).id == ada.id
    with pytest.raises(Conflict, match="alan@acme.com"):
        await store.set_user_email(ada.id, "alan@acme.com")
    with pytest.raises(Invalid):
        await store.set_user_email(ada.id, "not an address")
    with pytest.raises(NotFound):
        await store.set_user_name("usr-nobody", "x")


async def test_external_ids_are_kept_per_organization(store):
    acme = await store.create_org("acme")
    globex = await store.create_org("globex")
    ada = await store.create_user("ada@acme.com", "Ada")
    team = await store.create_team(acme.id, "search")
    await store.set_scim_external_id(acme.id, "user", ada.id, "okta-1")
    await store.set_scim_external_id(globex.id, "user", ada.id, "entra-9")
    await store.set_scim_external_id(acme.id, "team", team.id, "grp-1")
    assert await store.scim_external_ids(acme.id, "user") == {ada.id: "okta-1"}
    assert await store.scim_external_ids(globex.id, "user") == {ada.id: "entra-9"}
    assert await store.scim_external_ids(acme.id, "team") == {team.id: "grp-1"}
    await store.set_scim_external_id(acme.id, "user", ada.id, "okta-2")
    assert await store.scim_external_ids(acme.id, "user") == {ada.id: "okta-2"}
    await store.set_scim_external_id(acme.id, "user", ada.id, None)
    assert await store.scim_external_ids(acme.id, "user") == {}
    with pytest.raises(Invalid):
        await store.scim_external_ids(acme.id, "project")


async def test_forgetting_a_person_drops_their_external_ids(store):
    acme = await store.create_org("acme")
    ada = await store.create_user("ada@acme.com", "Ada")
    await store.set_scim_external_id(acme.id, "user", ada.id, "ada.lovelace@corp.example")
    await store.forget_user(ada.id)
    assert await store.scim_external_ids(acme.id, "user") == {}
