"""People, quotas, usage export and settings through the console: forms, refusals, and a key shown once."""

from __future__ import annotations

from console_screen import choose, keys, open_view, row, screen, type_in


def status(app) -> str:
    return screen(app).splitlines()[-2].strip()


async def _tree(app) -> None:
    await app.actions.create_org("acme", False)
    await app.actions.create_org("acme/web", True)
    await app.settle()


async def test_a_new_key_is_shown_once_and_never_again(app):
    await _tree(app)
    await open_view(app, "API keys")
    await keys(app, "A")
    assert "Issue a key" in screen(app)
    await keys(app, "tab", "tab", "tab", "tab", "tab", "enter")  # nothing given
    assert "Give a project, a person, or both." in screen(app)
    await keys(app, "tab", "tab")
    await type_in(app, "acme/web")
    await keys(app, "tab", "tab")
    await type_in(app, "ci")
    await keys(app, "tab")
    await type_in(app, "ninety days")
    await keys(app, "tab", "tab", "enter")
    assert "Lives for: expected a duration like 5s, got 'ninety days'" in screen(app)
    await keys(app, "up", "up")
    await type_in(app, "90d")
    await keys(app, "tab", "tab", "enter")

    text = screen(app)
    assert "A new key" in text and "shown this once and never again" in text
    words = text.replace("│", " ").split()
    secret = next(w for w in words if w.startswith("llmgw-") and len(w) > 40)
    await keys(app, "enter")
    assert not app.dialogs
    await app.model.refresh_now("keys")
    text = screen(app)
    assert secret not in text and "acme/web" in text and "ci" in text and "active" in text
    assert secret not in repr(app.model["keys"].data)

    # Rotating asks, then shows the new secret once; the old one ends after the overlap.
    kid = app.model.data("keys")[0]["id"]
    await row(app, kid)
    await keys(app, "enter")
    await choose(app, "Rotate")
    await type_in(app, "0s")
    await keys(app, "enter")
    assert f"Rotate {kid}? The old key stops working after 0s." in screen(app)
    await keys(app, "y")
    text = screen(app)
    assert "The new key" in text and "shown this once" in text and secret not in text
    await keys(app, "enter")

    # Revoking asks; only Y revokes.
    await app.model.refresh_now("keys")
    new = next(k for k in app.model.data("keys") if k["state"] == "active")
    await row(app, new["id"])
    await keys(app, "enter")
    await choose(app, "Revoke")
    await keys(app, "esc")
    assert status(app) == "Nothing was done."
    await keys(app, "enter")
    await choose(app, "Revoke")
    await keys(app, "Y")
    assert status(app) == f"{new['id']}: revoked"


async def test_accounts_add_refuses_a_bad_email_then_suspend_asks(app, live):
    await open_view(app, "Accounts")
    await keys(app, "a")
    await type_in(app, "bob")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    assert "Email: 'bob' is not an email address" in screen(app)
    assert app.model.data("users") == []
    await keys(app, "tab", "tab")
    await type_in(app, "Bob@Example.com")
    await keys(app, "tab", "tab", "right", "right", "tab", "tab", "enter")  # staff role: operator
    assert status(app) == "bob@example.com: added, active"
    assert "bob@example.com  bob   operator  active" in screen(app)

    # The same email again: the control plane's refusal, word for word.
    await keys(app, "a")
    await type_in(app, "bob@example.com")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    refusal = live.run(_refusal_of_a_second_bob(live))
    assert "Refused" in screen(app) and refusal in screen(app)
    await keys(app, "enter", "esc")

    await keys(app, "enter")
    await choose(app, "Suspend")
    assert "Suspend bob@example.com?" in screen(app)
    await keys(app, "y")
    assert "bob@example.com  bob   operator  suspended" in screen(app)
    await keys(app, "enter")
    await choose(app, "Reinstate")
    assert "active" in screen(app)


async def _refusal_of_a_second_bob(live) -> str:
    """What the store says to a second account with the same email, as the API words it."""
    audit = await live.store.list_audit(action="users.create", limit=1)
    return audit[0].detail["reason"]


async def test_organizations_tree_limits_and_remove(app):
    await open_view(app, "Organizations")
    await keys(app, "A")
    await type_in(app, "acme")
    await keys(app, "enter")
    await app.model.refresh_now("orgs")
    assert "acme  org   acme  -" in screen(app)
    await keys(app, "enter")
    await choose(app, "Add a team")
    await type_in(app, "ml")
    await keys(app, "tab", "tab", "enter")
    await app.model.refresh_now("orgs")
    assert "  ml  team  acme/ml  -" in screen(app)

    await keys(app, "enter")
    await choose(app, "Limits")
    assert "Limits of org:acme" in screen(app)
    await type_in(app, "0")
    await keys(app, "tab", "tab", "tab", "tab", "tab", "enter")
    assert "Requests a minute: 0 is less than 1" in screen(app)
    await keys(app, "tab", "tab")
    await type_in(app, "60")
    await keys(app, "tab", "tab")
    await type_in(app, "25")
    await keys(app, "tab", "right", "tab", "tab", "enter")
    await app.model.refresh_now("orgs")
    assert "acme  org   acme     60 rpm, 25.00/day" in screen(app)
    # Filled with what is set now.
    await keys(app, "enter")
    await choose(app, "Limits")
    text = screen(app)
    assert "Requests a minute  60" in text and "25.00" in text and "◀ day ▶" in text
    await keys(app, "esc")

    await keys(app, "enter")
    await choose(app, "Remove…")
    await keys(app, "y")
    text = screen(app)
    assert "Refused" in text and "acme" in text
    await keys(app, "enter")
    await row(app, app.model.data("orgs")["nodes"][1]["id"])
    await keys(app, "enter")
    await choose(app, "Remove…")
    await keys(app, "y")
    assert status(app) == "team acme/ml: removed"


async def test_quotas_add_checked_in_the_form_then_change_and_remove(app, live):
    await _tree(app)
    await app.actions.create_org("acme/ml", False)
    await open_view(app, "Quotas")
    await keys(app, "A")
    await type_in(app, "acme/ml")
    await keys(app, "tab")
    await type_in(app, "8")
    await keys(app, "tab", "tab")
    await type_in(app, "lots")
    await keys(app, "tab")
    await type_in(app, "9")
    await keys(app, "tab", "tab", "tab", "enter")
    text = screen(app)
    assert "Scope: write org:NAME, team:ORG/TEAM or project:PATH" in text
    assert "Most memory: " in text and "lots" in text
    assert app.model.data("quotas") == []
    await keys(app, "tab", "tab")
    await type_in(app, "team:acme/ml")
    await keys(app, "tab", "tab", "tab")
    await type_in(app, "512GiB")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    assert "Kept GPUs: 9 is more than the most (8)" in screen(app)
    await keys(app, "up", "up", "up")
    await type_in(app, "2")
    await keys(app, "tab", "tab", "tab", "enter")
    assert status(app) == "team:acme/ml: quota set"
    assert "team:acme/ml  8 GPUs, 512GiB  2 GPUs" in screen(app)

    await keys(app, "enter")
    await choose(app, "Remove")
    await keys(app, "y")
    assert "(none)" in screen(app)


async def test_usage_exports_csv_to_a_file_and_asks_before_replacing_one(app, tmp_path):
    await open_view(app, "Usage")
    await keys(app, "E")
    target = tmp_path / "usage.csv"
    await type_in(app, str(tmp_path / "missing" / "u.csv"))
    await keys(app, "tab")
    await type_in(app, "project,galaxy")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    text = screen(app, (240, 50))
    assert f"File: the folder {tmp_path / 'missing'} does not exist" in text
    assert "By: 'galaxy' is not one of org, team, project, user, key, model" in text
    await keys(app, "tab", "tab")
    await type_in(app, str(target))
    await keys(app, "tab")
    await type_in(app, "project,model")
    await keys(app, "tab", "tab", "tab", "tab", "enter")
    assert f"Wrote 0 rows to {target}." in screen(app, (240, 50))
    assert target.read_text().startswith("period_start,")
    await keys(app, "enter", "E")
    await type_in(app, str(target))
    await keys(app, "tab", "tab", "tab", "tab", "tab", "enter")
    assert f"{target} exists. Replace it?" in screen(app, (240, 50))
    await keys(app, "n", "esc")
    assert not app.dialogs


async def test_settings_tree_save_checked_and_put_back(app, live):
    # The cluster's keys in the server.yaml tree: saved to the store at once, checked, put back with U.
    await open_view(app, "server.yaml")
    await row(app, "router")
    await keys(app, "enter")
    assert "server.yaml › router" in screen(app)
    await row(app, "router.retries")
    await keys(app, "right")
    text = screen(app)
    assert "server.yaml › router › retries" in text and "attempts" in text and "cluster" in text
    await row(app, "router.retries.attempts")
    await keys(app, "enter")
    assert "Set router.retries.attempts" in screen(app)
    await type_in(app, "many")
    await keys(app, "enter")
    assert "router.retries.attempts: expected a whole number, got 'many'" in screen(app)
    await type_in(app, "99")
    await keys(app, "enter")
    assert "router.retries.attempts: 99 is above the most allowed, 10" in screen(app)
    await type_in(app, "4")
    await keys(app, "enter")
    assert status(app) == "router.retries.attempts = 4 (set by ann)"
    line = next(line for line in screen(app).splitlines() if "attempts" in line)
    assert " 4 " in line and "store · ann" in line
    assert "U back to default" in screen(app).splitlines()[-1]
    await keys(app, "U")
    await app.model.refresh_now("server-config")
    assert "router.retries.attempts: back to server.yaml's" in status(app)
    assert "store ·" not in screen(app)
    await keys(app, "left", "left")
    assert "server.yaml ›" not in screen(app)
    await row(app, "guard")
    await keys(app, "enter")
    await row(app, "guard.mode")
    await keys(app, "enter")
    text = screen(app)
    assert "Set guard.mode" in text and "◀ enforce ▶" in text
    await keys(app, "right", "enter")
    assert status(app) == "guard.mode = shadow (set by ann)"
    await keys(app, "left", "left")
    assert not app.in_panel


async def test_audit_shows_the_consoles_changes_and_their_fields(app):
    await open_view(app, "Nodes")
    await keys(app, "enter")
    await choose(app, "Cordon")
    await type_in(app, "fan")
    await keys(app, "enter")
    await open_view(app, "Audit")
    text = screen(app)
    assert "ann    console  nodes.cordon  node:gpu-a-01  ok" in text
    await keys(app, "enter")
    text = screen(app)
    assert "nodes.cordon node:gpu-a-01" in text and '"reason": "fan"' in text
