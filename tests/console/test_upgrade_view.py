"""Do → Upgrade the cluster against a real leading control plane (upgrade_cluster.py): the mirror's releases
listed with whether each verifies with the cluster's keys, a release chosen with by rack and roll back, the
order said before it starts, the job followed live to its result; each refusal in the control plane's words with
nothing started: a release signed by a stranger's key, a second upgrade while one runs, a standby. (test_do_tmux.py
does it in a real terminal.)"""

from __future__ import annotations

import asyncio

import pytest
from console_screen import choose, keys, open_view, screen
from upgrade_cluster import NEW, OLD, STRANGER, UpgradeCluster

from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi

WIDE = (200, 60)


@pytest.fixture
def cluster(tmp_path):
    with UpgradeCluster(tmp_path) as c:
        yield c


@pytest.fixture
async def console(cluster, monkeypatch):
    """The console on the real control plane; a followed job read again every 0.1 s, not every second."""
    monkeypatch.setattr("llmgw.console.views.jobs.FOLLOW_S", 0.1)
    console = ConsoleApp(AdminApi(cluster.live.url, cluster.live.TOKEN, "ann"), machine="cp-test")
    await console.model.refresh_now()
    await console.settle()
    yield console
    await console.stop_following()
    await console.settle()
    await console.api.close()


def said(text: str) -> str:
    """The dialogs' lines joined, their spaces made one."""
    return " ".join(" ".join(line.split("│")[1].split()) for line in text.splitlines() if line.count("│") >= 2)


async def until_shown(app, words: str, timeout: float = 20) -> str:
    for _ in range(int(timeout / 0.1)):
        text = screen(app, WIDE)
        if words in said(text):
            return text
        await asyncio.sleep(0.1)
    raise AssertionError(f"{words!r} never showed:\n{screen(app, WIDE)}")


async def test_the_releases_are_listed_with_whether_each_verifies(console, cluster):
    app = console
    await open_view(app, "Upgrade the cluster")
    text = screen(app, WIDE)
    [kid] = {r["key"] for r in app.model.data("releases")["releases"] if r["verified"]}
    assert f"{NEW}" in text and f"verifies: signed by trusted key {kid} (x86_64, aarch64)" in text
    line = next(row for row in text.splitlines() if f" {STRANGER} " in row)
    assert "does not verify: release 9.9.9: refused: signed by key" in line and "which is not trusted here" in line
    assert f"from {cluster.config.mirror.url}, checked against the cluster's trusted keys" in text


async def test_an_upgrade_by_rack_with_rollback_says_its_order_and_is_followed_to_its_end(console, cluster):
    app = console
    await open_view(app, "Upgrade the cluster")
    await keys(app, "enter")
    await choose(app, f"Upgrade to {NEW}")
    assert f"Upgrade the cluster to {NEW}" in screen(app, WIDE)
    await keys(app, "right", "tab", "right", "tab", "tab", "enter")  # by rack; roll back; the timeout; Upgrade
    question = said(screen(app, WIDE))
    assert "Are you sure?" in screen(app, WIDE)
    assert f"1. The leader checks release {NEW} on the mirror" in question
    assert "2. The standby control planes, one at a time" in question
    assert "3. The leader last of them: it hands its lease to an upgraded standby" in question
    assert "4. The nodes' agents, one rack at a time: rack r1: node-a; rack r2: node-b" in question
    assert "what was upgraded so far (the standbys when a control plane failed, the nodes when a node did) is sent " \
        "back to the file before" in question
    assert not cluster.upgrade_jobs()  # nothing yet: only Y goes on

    await keys(app, "y")
    text = await until_shown(app, "Done:")
    [job] = cluster.upgrade_jobs()
    assert f"Job {job['id']}: upgrade cluster to {NEW}" in text
    assert job["state"] == "done" and job["now"].startswith("done: ")
    assert f"Done: {job['now'].removeprefix('done: ')}" in said(text)  # said once, not "Done: done: …"
    shown = said(text)
    for step in job["steps"]:  # every step the API gives, in the dialog
        assert step["text"][:60] in shown, step["text"]
    assert "one rack at a time" in job["steps"][0]["text"]
    assert cluster.versions() == {"node-a": NEW, "node-b": NEW}
    [event] = cluster.audited("cluster.upgrade")
    assert event.actor == "ann"
    body = event.detail["fields"]
    assert (body["release"], body["by"], body["rollback"], body["timeout"]) == (NEW, "rack", True, 600)

    # Closed, the view says how the last upgrade ended.
    await keys(app, "enter")
    await app.model.refresh_now("jobs")
    app.view.refresh()
    assert f"Done: {job['now'].removeprefix('done: ')}" in screen(app, WIDE) and "The last upgrade" in screen(app, WIDE)


async def test_a_release_signed_by_a_key_not_trusted_is_refused_in_the_control_planes_words(console, cluster):
    app = console
    await open_view(app, "Upgrade the cluster")
    await keys(app, "enter")
    await choose(app, f"Upgrade to {STRANGER} (does not verify)")
    await keys(app, "tab", "tab", "tab", "enter", "y")  # node by node, stop there; Upgrade; yes
    text = screen(app, WIDE)
    assert "Refused" in text
    shown = said(text)
    assert f"release {STRANGER}: refused: signed by key" in shown and "which is not trusted here" in shown
    assert not cluster.upgrade_jobs() and cluster.versions() == {"node-a": OLD, "node-b": OLD}
    assert f"Upgrade the cluster to {STRANGER}" in text  # the form stays for another try


async def test_without_a_mirror_the_view_says_why_no_release_is_listed(app):
    await open_view(app, "Upgrade the cluster")
    text = screen(app, WIDE)
    assert "Could not read them: mirror.url is empty: releases are kept in the mirror's file server" in text
    assert "llmgw ctl upgrade RELEASE" in text  # what an upgrade does is said all the same


async def test_a_second_upgrade_while_one_runs_is_refused_naming_the_one_running(tmp_path, monkeypatch):
    monkeypatch.setattr("llmgw.console.views.jobs.FOLLOW_S", 0.1)
    with UpgradeCluster(tmp_path, silent=("node-a",)) as cluster:  # node-a never comes back: the job runs on
        first = cluster.start_upgrade({"release": NEW, "timeout": 60})
        app = ConsoleApp(AdminApi(cluster.live.url, cluster.live.TOKEN, "ann"), machine="cp-test")
        try:
            await open_view(app, "Upgrade the cluster")
            assert "The upgrade running" in screen(app, WIDE)
            await keys(app, "enter")
            assert f"Follow the upgrade running ({first['id']})" in screen(app, WIDE)
            await choose(app, f"Upgrade to {NEW}")
            await keys(app, "tab", "tab", "tab", "enter", "y")
            shown = said(screen(app, WIDE))
            assert "Refused" in screen(app, WIDE)
            assert f"an upgrade is already running ({first['id']}:" in shown
            assert f"`llmgw ctl jobs {first['id']}` follows it" in shown
            assert [j["id"] for j in cluster.upgrade_jobs()] == [first["id"]]
        finally:
            await app.stop_following()
            await app.settle()
            await app.api.close()


async def test_a_standby_refuses_naming_the_leader(cluster):
    with cluster.standby() as standby:
        app = ConsoleApp(AdminApi(standby.live.url, standby.live.TOKEN, "ann"), machine="cp-2")
        try:
            await open_view(app, "Upgrade the cluster")
            assert f"{NEW}" in screen(app, WIDE)  # a standby reads the mirror too
            await keys(app, "enter")
            await choose(app, f"Upgrade to {NEW}")
            await keys(app, "tab", "tab", "tab", "enter", "y")
            text = screen(app, WIDE)
            assert "Refused" in text and "this control plane is a standby; ask the leader, cp-1" in said(text)
            assert not cluster.upgrade_jobs() and cluster.versions() == {"node-a": OLD, "node-b": OLD}
        finally:
            await app.settle()
            await app.api.close()


async def test_send_every_node_back_asks_then_follows_the_way_back(console, cluster):
    app = console
    first = cluster.start_upgrade({"release": NEW})
    for _ in range(100):
        if cluster.upgrade_jobs()[0]["state"] == "done":
            break
        await asyncio.sleep(0.1)
    assert cluster.versions() == {"node-a": NEW, "node-b": NEW}
    await open_view(app, "Upgrade the cluster")
    await keys(app, "enter")
    await choose(app, "Send the cluster back")
    question = said(screen(app, WIDE))
    assert "Send the cluster back to the files it ran before its last upgrade?" in question
    assert "then one node at a time: node-a, node-b:" in question
    assert "the leader last, handing its lease over" in question
    await keys(app, "y")
    text = await until_shown(app, "Done:")
    back = next(j for j in cluster.upgrade_jobs() if j["id"] != first["id"])
    assert f"Job {back['id']}: upgrade cluster back to the file before" in text
    assert cluster.versions() == {"node-a": OLD, "node-b": OLD}
    newest, _ = cluster.audited("cluster.upgrade")  # newest first: the console's, after the API's own
    assert newest.actor == "ann" and newest.detail["fields"]["back"] is True


async def test_a_mirror_that_does_not_answer_is_said_with_its_address(tmp_path):
    import urllib.error
    import urllib.request

    from llmgw.admin.testing import FakeCluster, LiveAdmin
    from llmgw.config.load import parse_server_config
    from upgrade_helpers import free_port

    mirror = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with LiveAdmin(tmp_path, cluster=FakeCluster(), config=parse_server_config({"mirror": {"url": mirror}})) as live:
        req = urllib.request.Request(live.url + "/api/v1/releases", headers=live.headers())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        assert refused.value.code == 502
        app = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-test")
        try:
            await open_view(app, "Upgrade the cluster")
            text = " ".join(screen(app, WIDE).split())
            assert f"Could not read them: cannot read the releases from the mirror at {mirror}" in text
            assert "is `llmgw mirror serve` running there?" in text
        finally:
            await app.settle()
            await app.api.close()
