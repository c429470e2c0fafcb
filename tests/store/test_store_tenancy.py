"""Organizations, teams, projects, people and memberships."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Invalid, NotFound, Store


async def test_org_crud(store: Store) -> None:
    acme = await store.create_org("  Acme ")
    assert acme.name == "Acme" and acme.id.startswith("org-")
    beta = await store.create_org("beta")
    assert await store.get_org(acme.id) == acme
    assert await store.get_org_by_name("ACME") == acme
    assert await store.get_org("org-nope") is None
    assert [o.name for o in await store.list_orgs()] == ["Acme", "beta"]

    renamed = await store.rename_org(acme.id, "Acme Corp")
    assert renamed.name == "Acme Corp" and renamed.created_at == acme.created_at
    assert (await store.get_org(acme.id)).name == "Acme Corp"
    # Renaming to its own name (in another case) is not a conflict with itself.
    assert (await store.rename_org(acme.id, "ACME CORP")).name == "ACME CORP"

    await store.delete_org(beta.id)
    assert await store.get_org(beta.id) is None
    with pytest.raises(NotFound, match="no organization"):
        await store.delete_org(beta.id)
    with pytest.raises(NotFound):
        await store.rename_org("org-nope", "x")


async def test_names_unique_per_parent(store: Store) -> None:
    acme = await store.create_org("Acme")
    other = await store.create_org("Other")
    with pytest.raises(Conflict, match="organization named 'acme' already exists"):
        await store.create_org("acme")

    ml = await store.create_team(acme.id, "ml")
    await store.create_team(other.id, "ml")  # another organization: fine
    with pytest.raises(Conflict, match="already has a team named 'ML'"):
        await store.create_team(acme.id, "ML")
    web = await store.create_team(acme.id, "web")
    with pytest.raises(Conflict):
        await store.rename_team(web.id, "ml")

    await store.create_project(acme.id, "train", ml.id)
    await store.create_project(acme.id, "train")  # directly in the org: another parent
    await store.create_project(acme.id, "train", web.id)
    with pytest.raises(Conflict, match="team already has a project named 'Train'"):
        await store.create_project(acme.id, "Train", ml.id)
    with pytest.raises(Conflict, match="organization already has a project"):
        await store.create_project(acme.id, "TRAIN")
    with pytest.raises(Conflict):
        await store.rename_org(other.id, "ACME")


async def test_teams_and_projects(store: Store) -> None:
    acme = await store.create_org("Acme")
    other = await store.create_org("Other")
    ml = await store.create_team(acme.id, "ml")
    foreign = await store.create_team(other.id, "x")
    train = await store.create_project(acme.id, "train", ml.id)
    loose = await store.create_project(acme.id, "loose")

    assert train.team_id == ml.id and loose.team_id is None
    assert await store.get_team(ml.id) == ml
    assert await store.get_team_by_name(acme.id, "ML") == ml
    assert await store.get_project(train.id) == train
    assert await store.get_project_by_name(acme.id, "train", ml.id) == train
    assert await store.get_project_by_name(acme.id, "train") is None
    assert await store.get_project_by_name(acme.id, "loose") == loose
    assert [t.name for t in await store.list_teams(acme.id)] == ["ml"]
    assert len(await store.list_teams()) == 2
    assert [p.name for p in await store.list_projects(acme.id)] == ["loose", "train"]
    assert [p.name for p in await store.list_projects(team_id=ml.id)] == ["train"]
    assert (await store.rename_project(train.id, "training")).name == "training"
    assert (await store.rename_team(ml.id, "research")).name == "research"

    with pytest.raises(Invalid, match="not in organization"):
        await store.create_project(acme.id, "p", foreign.id)
    with pytest.raises(NotFound, match="no team"):
        await store.create_project(acme.id, "p", "team-missing")
    with pytest.raises(NotFound, match="no organization"):
        await store.create_team("org-missing", "t")


async def test_only_empty_things_are_removed(store: Store) -> None:
    acme = await store.create_org("Acme")
    ml = await store.create_team(acme.id, "ml")
    train = await store.create_project(acme.id, "train", ml.id)
    with pytest.raises(Conflict, match=r"still has 1 team\(s\) and 1 project\(s\)"):
        await store.delete_org(acme.id)
    with pytest.raises(Conflict, match=r"team 'ml' still has 1 project"):
        await store.delete_team(ml.id)

    user = await store.create_user("a@example.com", "A")
    await store.add_membership(user.id, "project", train.id, "owner")
    await store.add_membership(user.id, "org", acme.id)
    await store.set_limits("project", train.id, rpm=5)
    await store.delete_project(train.id)
    await store.delete_team(ml.id)
    # Memberships and limits of what was removed go with it.
    assert [m.scope_kind for m in await store.list_memberships(user_id=user.id)] == ["org"]
    assert await store.get_limits("project", train.id) is None
    await store.delete_org(acme.id)
    assert await store.list_memberships(user_id=user.id) == []
    assert await store.list_orgs() == []


async def test_bad_names_are_refused_before_writing(store: Store) -> None:
    for bad in ["", "   ", "a/b", "tab\there", "x" * 101, 42, None]:
        with pytest.raises(Invalid):
            await store.create_org(bad)  # type: ignore[arg-type]
    assert await store.list_orgs() == []


async def test_users(store: Store) -> None:
    ann = await store.create_user(" Ann@Example.COM ", "Ann", password_hash="argon2:x")
    assert ann.email == "ann@example.com" and ann.role == "none" and ann.state == "active"
    bob = await store.create_user("bob@example.com", "Bob", role="admin", state="pending")
    with pytest.raises(Conflict, match="already exists"):
        await store.create_user("ANN@example.com", "Another Ann")
    for kwargs in ({"role": "root"}, {"state": "gone"}):
        with pytest.raises(Invalid, match="is not one of"):
            await store.create_user("c@example.com", "C", **kwargs)
    with pytest.raises(Invalid, match="not an address"):
        await store.create_user("not-an-email", "D")

    assert await store.get_user(ann.id) == ann
    assert await store.get_user_by_email("ANN@example.com") == ann
    assert await store.get_user_by_email("nobody@example.com") is None
    assert [u.email for u in await store.list_users()] == ["ann@example.com", "bob@example.com"]
    assert [u.id for u in await store.list_users(state="pending")] == [bob.id]
    assert [u.id for u in await store.list_users(role="admin")] == [bob.id]

    assert (await store.set_user_state(bob.id, "active")).state == "active"
    assert (await store.set_user_role(ann.id, "billing")).role == "billing"
    assert (await store.set_password_hash(ann.id, None)).password_hash is None
    assert (await store.set_password_hash(ann.id, "argon2:y")).password_hash == "argon2:y"
    with pytest.raises(Invalid):
        await store.set_user_state(ann.id, "deleted")
    with pytest.raises(NotFound, match="no person"):
        await store.set_user_role("usr-missing", "viewer")


async def test_memberships(store: Store) -> None:
    acme = await store.create_org("Acme")
    ml = await store.create_team(acme.id, "ml")
    ann = await store.create_user("ann@example.com", "Ann")
    bob = await store.create_user("bob@example.com", "Bob")

    m = await store.add_membership(ann.id, "team", ml.id)
    assert (m.role, m.scope_kind, m.scope_id) == ("member", "team", ml.id)
    promoted = await store.add_membership(ann.id, "team", ml.id, "owner")
    assert promoted.role == "owner" and promoted.created_at == m.created_at
    await store.add_membership(bob.id, "team", ml.id)
    await store.add_membership(ann.id, "org", acme.id)

    assert len(await store.list_memberships(scope_kind="team", scope_id=ml.id)) == 2
    assert {x.scope_kind for x in await store.list_memberships(user_id=ann.id)} == {"org", "team"}
    assert await store.remove_membership(bob.id, "team", ml.id) is True
    assert await store.remove_membership(bob.id, "team", ml.id) is False

    with pytest.raises(NotFound, match="no team"):
        await store.add_membership(ann.id, "team", "team-missing")
    with pytest.raises(NotFound, match="no person"):
        await store.add_membership("usr-missing", "org", acme.id)
    with pytest.raises(Invalid):
        await store.add_membership(ann.id, "key", acme.id)
    with pytest.raises(Invalid):
        await store.add_membership(ann.id, "org", acme.id, "admin")
