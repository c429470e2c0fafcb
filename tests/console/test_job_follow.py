"""A job followed in its dialog (Jobs → Enter, and every job Do starts): read again while it runs, new steps
shown as they come, ending with how it ended; closing the dialog stops the reading, not the job."""

from __future__ import annotations

import asyncio
import datetime as dt

from console_screen import keys, open_view, screen

from llmgw.admin.cluster_types import JobInfo, JobStep

T0 = dt.datetime(2025, 3, 10, 12, 0, 0, tzinfo=dt.UTC)


def upgrade_job(state: str, now: str, *more: str) -> JobInfo:
    steps = [JobStep(at=T0, text="ann asked to upgrade the cluster to 1.1.0, one node at a time"),
             *(JobStep(at=T0 + dt.timedelta(seconds=i + 1), text=t) for i, t in enumerate(more))]
    return JobInfo(id="job-u1", model="cluster to 1.1.0", kind="upgrade", by="ann", state=state, now=now,
                   started=T0, ended=None if state == "running" else T0 + dt.timedelta(seconds=9), steps=steps)


async def shown(app, words: str) -> str:
    for _ in range(50):
        text = screen(app)
        if words in text:
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"{words!r} never showed:\n{screen(app)}")


async def test_a_running_job_is_read_again_until_it_ends_and_says_how(app, live, monkeypatch):
    monkeypatch.setattr("llmgw.console.views.jobs.FOLLOW_S", 0.05)
    live.cluster.job_list.append(upgrade_job("running", "node-a: upgrading"))
    await open_view(app, "Jobs")
    await keys(app, "enter")
    text = screen(app)
    assert "Job job-u1: upgrade cluster to 1.1.0" in text and "running: node-a: upgrading" in text
    assert "Done:" not in text

    live.cluster.job_list[-1] = upgrade_job("running", "node-b: upgrading", "node-a: back with llmgw 1.1.0")
    assert "12:00:01  node-a: back with llmgw 1.1.0" in await shown(app, "node-b: upgrading")
    live.cluster.job_list[-1] = upgrade_job("done", "every node runs llmgw 1.1.0", "node-a: back with llmgw 1.1.0",
                                            "node-b: back with llmgw 1.1.0")
    text = await shown(app, "Done: every node runs llmgw 1.1.0")
    assert "12:00:02  node-b: back with llmgw 1.1.0" in text
    await asyncio.sleep(0.2)
    assert not app.followers  # it ended: nothing reads it any more

    await keys(app, "enter")
    assert "Job job-u1" not in screen(app)


async def test_closing_the_dialog_stops_the_reading(app, live, monkeypatch):
    monkeypatch.setattr("llmgw.console.views.jobs.FOLLOW_S", 0.05)
    live.cluster.job_list.append(upgrade_job("running", "node-a: upgrading"))
    await open_view(app, "Jobs")
    await keys(app, "enter")
    assert app.followers
    await keys(app, "esc")
    await asyncio.sleep(0.2)
    assert not app.followers and not app.dialogs


async def test_a_failed_job_says_so_in_words(app, live):
    live.cluster.job_list.append(upgrade_job("failed", "node-a: not upgraded: signed by key abc, not trusted"))
    await open_view(app, "Jobs")
    await keys(app, "enter")
    assert "Failed: node-a: not upgraded: signed by key abc, not trusted" in screen(app)
    assert not app.followers
