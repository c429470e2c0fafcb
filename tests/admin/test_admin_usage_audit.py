"""Usage sums and their CSV export; the audit log, its filters, refusals and secrets."""

from __future__ import annotations

import csv
import datetime as dt
import io

from llmgw.store import UsageRow

from .conftest import JSON


async def _tree_and_usage(admin) -> dict[str, str]:
    ids = {}
    for path in ("acme", "acme/ml", "acme/ml/train", "beta"):
        node = await admin.call("POST", "/orgs", {"path": path}, status=201)
        ids[path] = node["id"]
    await admin.call("POST", "/orgs", {"path": "beta/web", "project": True}, status=201)
    beta_web = (await admin.store.list_projects())[-1]
    now = dt.datetime.now(dt.UTC)
    rows = []
    for i in range(6):
        acme = i % 2 == 0
        rows.append(UsageRow(
            request_id=f"req-{i}", at=now - dt.timedelta(hours=1 + i * 30),
            org_id=ids["acme"] if acme else ids["beta"], team_id=ids["acme/ml"] if acme else None,
            project_id=ids["acme/ml/train"] if acme else beta_web.id, model_served="qwen" if i < 4 else "llama",
            prompt_tokens=100, completion_tokens=10 * (i + 1), cost_micros=1_500_000, status=200 if i else 500,
            latency_ms=100,
        ))
    await admin.store.insert_usage_rows(rows)
    return ids


async def test_usage_sums_by_group_and_period(bare):
    ids = await _tree_and_usage(bare)
    day = await bare.call("GET", "/usage?by=org&since=24h")
    assert [(r["label"], r["requests"], r["errors"]) for r in day["rows"]] == [("acme", 1, 1)]
    week = await bare.call("GET", "/usage?by=org&since=7d")
    got = {r["label"]: (r["requests"], r["prompt_tokens"], r["cost_micros"]) for r in week["rows"]}
    assert got == {"acme": (3, 300, 4_500_000), "beta": (3, 300, 4_500_000)}
    assert week["period"] == "total" and week["currency"] == "USD"
    by_model = await bare.call("GET", "/usage?by=model&since=7d")
    assert {r["group"]: r["requests"] for r in by_model["rows"]} == {"qwen": 4, "llama": 2}
    daily = await bare.call("GET", "/usage?by=none&period=day&since=7d")
    assert sum(r["requests"] for r in daily["rows"]) == 6 and len(daily["rows"]) >= 3
    assert all(r["period_start"].endswith("T00:00:00Z") for r in daily["rows"])
    scoped = await bare.call("GET", "/usage?by=project&since=7d&scope=team:acme/ml")
    assert [(r["label"], r["requests"]) for r in scoped["rows"]] == [("acme/ml/train", 3)]
    assert ids["acme/ml/train"] == scoped["rows"][0]["group"]
    error = await bare.refused("GET", "/usage?by=galaxy", status=400)
    assert error.startswith("by: 'galaxy' is not one of org, team")
    assert "one group at a time" in await bare.refused("GET", "/usage?by=org,model", status=400)
    assert "is not a time" in await bare.refused("GET", "/usage?since=yesterday", status=400)
    assert "must be after" in await bare.refused("GET", "/usage?since=1h&until=2h", status=400)


async def test_usage_export_is_csv_by_one_or_several_groups(bare):
    await _tree_and_usage(bare)
    resp = await bare.client.get("/api/v1/usage/export?by=project,model&from=7d&period=total", headers=JSON)
    assert resp.status == 200 and resp.content_type == "text/csv"
    assert "attachment" in resp.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(await resp.text())))
    got = {(r["project"], r["model"]): (int(r["requests"]), r["cost_usd"]) for r in rows}
    assert got == {("acme/ml/train", "qwen"): (2, "3.000000"), ("acme/ml/train", "llama"): (1, "1.500000"),
                   ("beta/web", "qwen"): (2, "3.000000"), ("beta/web", "llama"): (1, "1.500000")}
    assert all(r["period_start"] == "total" for r in rows)
    text = await bare.call("GET", "/usage/export?by=org&from=7d&period=day")
    header, *lines = text.splitlines()
    assert header.startswith("period_start,org,org_id,requests,errors")
    assert sum(int(line.split(",")[3]) for line in lines) == 6


async def test_every_change_is_recorded_with_who_how_and_the_fields(bare):
    hdr = {**JSON, "X-Llmgw-Actor": "ann@example.com", "X-Llmgw-Via": "console"}
    await bare.call("PUT", "/settings/guard.mode", {"value": "shadow"}, headers=hdr)
    await bare.refused("PUT", "/settings/guard.mode", {"value": "loud"}, headers=hdr, status=400)
    await bare.call("POST", "/users", {"email": "bob@example.com"}, headers=hdr, status=201)
    await bare.call("POST", "/keys", {"user": "bob@example.com", "name": "laptop"}, headers=hdr, status=201)
    events = (await bare.call("GET", "/audit?actor=ann@example.com"))["events"]
    assert [(e["action"], e["outcome"], e["via"]) for e in events] == [
        ("keys.create", "ok", "console"), ("users.create", "ok", "console"),
        ("settings.set", "refused", "console"), ("settings.set", "ok", "console")]
    refused = events[2]
    assert refused["reason"].startswith("guard.mode: expected one of enforce, shadow, off")
    assert refused["detail"]["fields"] == {"key": "guard.mode", "value": "loud"}
    assert refused["target"] == "setting:guard.mode"
    # Tenancy's own event (users.create) carries the request's fields and via: one event per change.
    assert events[1]["detail"]["email"] == "bob@example.com"
    assert events[1]["detail"]["fields"] == {"email": "bob@example.com"}


async def test_audit_filters_and_pages(bare):
    for value in ("off", "shadow", "enforce"):
        await bare.call("PUT", "/settings/guard.mode", {"value": value}, headers={**JSON, "X-Llmgw-Actor": "ci"})
    await bare.call("PUT", "/settings/router.retries.attempts", {"value": 1})
    assert len((await bare.call("GET", "/audit?action=settings.*"))["events"]) == 4
    assert len((await bare.call("GET", "/audit?actor=ci"))["events"]) == 3
    assert len((await bare.call("GET", "/audit?target=setting:router.retries.attempts"))["events"]) == 1
    assert (await bare.call("GET", "/audit?since=2020-01-01&until=2020-02-01"))["events"] == []
    assert len((await bare.call("GET", "/audit?since=1h"))["events"]) == 4
    page = await bare.call("GET", "/audit?limit=3")
    assert len(page["events"]) == 3 and page["next_before_id"] is not None
    rest = await bare.call("GET", f"/audit?limit=3&before_id={page['next_before_id']}")
    assert len(rest["events"]) == 1 and rest["next_before_id"] is None
    assert "between 1 and 1000" in await bare.refused("GET", "/audit?limit=0", status=400)


async def test_secrets_in_the_fields_are_taken_out(admin):
    spec = {"name": "remote", "endpoints": [{"url": "https://api.example.com/v1", "api_key": "sk-live-123"}],
            "profiles": [{"engine": "sim", "env": {"HF_TOKEN": "hf_abc"}}]}
    # Refused (a model is on the cluster or at a provider, not both), and recorded all the same.
    await admin.refused("POST", "/models", spec, status=400)
    [event] = await admin.store.list_audit(action="models.add")
    assert event.detail["outcome"] == "refused"
    fields = event.detail["fields"]
    assert fields["endpoints"][0]["api_key"] == "[removed]"
    assert fields["profiles"][0]["env"]["HF_TOKEN"] == "[removed]"
    assert "sk-live-123" not in str(event.detail)
