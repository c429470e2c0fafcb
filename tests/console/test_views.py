"""Each view rendered against a live admin API: what an operator sees."""

from __future__ import annotations

import datetime as dt

from console_screen import choose, keys, open_view, screen

from llmgw.store import UsageRow


async def test_the_layout_names_the_machine_lists_the_entries_and_says_the_keys(app, live):
    text = screen(app)
    top, *_, status, bottom = text.splitlines()
    assert "cp-test" in top and live.url in top and "leading" in top and "llmgw " in top
    left = [line[:24].rstrip() for line in text.splitlines()[1:-2]]
    for group in ("Watch", "People", "Help", "Settings", "Do"):
        assert group in left
    for entry in ("Overview", "Nodes", "GPUs", "Models", "Replicas", "Usage", "Quotas", "Jobs", "Logs", "Accounts",
                  "API keys", "Organizations", "Audit", "Manual", "server.yaml", "Restart all replicas",
                  "Leave"):
        assert f"  {entry}" in text
    assert bottom.strip() == "↑↓ choose  →/Enter open  ? help  Q leave"
    assert status.strip() == ""


async def test_overview_is_ctl_status(app):
    text = screen(app)
    for line in ("control plane: leading", "nodes: 2 ready", "GPUs: h100-80g 1/4 in use", "replicas: 1 ready",
                 "models: 1 ready", "last 24h: 0 requests, 0 tokens, 0.00 USD"):
        assert line in text


async def test_nodes_gpus_and_replicas(app):
    await open_view(app, "Nodes")
    text = screen(app)
    assert "NODE      STATE  ADDRESS   GPUS         CORES  MEMORY  REPLICAS  AGENT  ENGINES" in text
    assert "gpu-a-01  ready  10.0.0.1  h100-80g x2  32     256GiB  1         -      sim 1.0" in text
    assert "Nodes: 2 ready" in text
    await keys(app, "enter")
    await choose(app, "Details")
    text = screen(app)
    assert "Node gpu-a-01" in text and "gpu 1: h100-80g NVIDIA H100 80GiB ok" in text
    assert "replicas: qwen-small-0001" in text and "engines: sim 1.0" in text
    await keys(app, "enter")

    await open_view(app, "GPUs")
    text = screen(app)
    assert "gpu-a-01  0    h100-80g  NVIDIA H100  80GiB   ok      qwen-small (qwen-small-0001)" in text
    assert "gpu-a-02  1    h100-80g  NVIDIA H100  80GiB   ok      -" in text

    await open_view(app, "Replicas")
    text = screen(app)
    assert "qwen-small-0001  qwen-small  gpu-a-01  ready  0" in text
    await keys(app, "enter")
    await choose(app, "Details")
    text = screen(app)
    assert "model qwen-small, profile default, engine sim" in text
    assert "not restarted alone" not in text


async def test_models_details_and_why_it_is_placed_where_it_is(app):
    await open_view(app, "Models")
    text = screen(app)
    assert "MODEL       STATUS  READY  MIN  MAX  CLASS     ORIGIN  OWNER" in text
    assert "qwen-small  ready   1/1    1    2    standard  file    team:acme/ml" in text
    await keys(app, "enter")
    menu = screen(app)
    for item in ("Details", "Replicas (scale)…", "Restart its replicas…", "Why is it placed where it is", "Remove…"):
        assert item in menu
    await choose(app, "Details")
    text = screen(app)
    assert "qwen-small: ready (1 of 1 ready)" in text and "concurrency: 64" in text
    await keys(app, "esc")

    await keys(app, "enter")
    await choose(app, "Why")
    text = screen(app)
    assert "Why qwen-small is placed where it is" in text
    assert "the next replica now: on gpu-a-01" in text and "because: the most free GPUs" in text


async def test_usage_by_org_team_and_project(app, live):
    async def fill():
        org = await live.store.create_org("acme")
        project = await live.store.create_project(org.id, "web")
        now = dt.datetime.now(dt.UTC)
        await live.store.insert_usage_rows([
            UsageRow(request_id=f"r{i}", at=now - dt.timedelta(hours=2), org_id=org.id, project_id=project.id,
                     model_served="qwen-small", prompt_tokens=10, completion_tokens=5, cost_micros=250_000)
            for i in range(3)])

    live.run(fill())
    await open_view(app, "Usage")
    text = screen(app)
    assert "Usage, the last 24 hours by org" in text
    assert "GROUP  REQUESTS  ERRORS  PROMPT  COMPLETION  COST      LATENCY_MS" in text
    assert "acme   3         0       30      15          0.75 USD  0" in text
    assert "→ group by the next" in text.splitlines()[-1] and "E export CSV" in text.splitlines()[-1]
    await keys(app, "right")
    assert "by team" in screen(app)
    await keys(app, "right")
    text = screen(app)
    assert "by project" in text and "acme/web  3" in text


async def test_quotas_accounts_keys_orgs_audit_and_settings_render(app):
    await app.actions.create_org("acme", False)
    await app.actions.create_org("acme/ml", False)
    await app.actions.set_quota({"scope": "team:acme/ml", "limit": {"gpus": 8, "memory": "512GiB"},
                                 "guaranteed": {"gpus": 2}})
    await app.actions.create_user({"email": "bob@example.com", "name": "Bob", "role": "viewer"})
    await app.actions.set_limits({"scope": "org:acme", "rpm": 60})

    await open_view(app, "Quotas")
    # qwen-small's owner is team:acme/ml: its replica's GPU counts against the quota.
    assert "team:acme/ml  8 GPUs, 512GiB  2 GPUs      1 GPU, 0 cores, 0GiB" in screen(app)
    await open_view(app, "Accounts")
    assert "bob@example.com  Bob   viewer  active  no" in screen(app)
    await open_view(app, "Organizations")
    text = screen(app)
    assert "acme  org   acme     60 rpm" in text and "  ml  team  acme/ml  -" in text
    await open_view(app, "Audit")
    text = screen(app)
    assert "ann    console  keys.limits   org:" in text and "ann    console  quotas.set    team:" in text
    await open_view(app, "server.yaml")
    text = screen(app)
    assert "Every key of server.yaml, from the configuration reference" in text
    assert "admission ›" in text and "control ›" in text and "listen  " in text


async def test_leave_says_the_cluster_keeps_running(app):
    await open_view(app, "Leave")
    assert "The cluster keeps running" in screen(app)


async def test_without_a_scheduler_the_panels_say_why(tmp_path):
    from llmgw.admin.testing import LiveAdmin
    from llmgw.console.app import ConsoleApp
    from llmgw.console.model import AdminApi

    with LiveAdmin(tmp_path) as live:
        app = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp")
        await app.model.refresh_now()
        try:
            assert "scheduler: this control plane runs no scheduler" in screen(app)
            await open_view(app, "Nodes")
            text = screen(app)
            assert "Could not read nodes: this control plane runs no scheduler" in text
            assert "nodes: this control plane runs no scheduler" in text.splitlines()[-2]
        finally:
            await app.api.close()
