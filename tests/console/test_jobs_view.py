"""Jobs in the console: the table, the sidebar saying how many run, Enter showing a job's steps."""

from __future__ import annotations

import datetime as dt

from console_screen import keys, open_view, screen

from llmgw.admin.cluster_types import JobInfo, JobStep

T0 = dt.datetime(2025, 3, 10, 12, 0, 0, tzinfo=dt.UTC)


def waiting_job() -> JobInfo:
    return JobInfo(id="job-7", model="big-model", kind="add", by="ann", state="waiting",
                   now="waiting for room: no node can run it: gpu-a-01: needs 4 free GPUs, has 1",
                   started=T0, steps=[JobStep(at=T0, text="ann added big-model to the catalog"),
                                      JobStep(at=T0 + dt.timedelta(seconds=1),
                                              text="waiting for room: no node can run it: gpu-a-01: needs 4 "
                                                   "free GPUs, has 1")])


def sidebar(app) -> list[str]:
    return [line[:24].rstrip() for line in screen(app).splitlines()[1:-2]]


async def test_the_sidebar_says_how_many_jobs_run_whichever_view_is_shown(app, live):
    assert "  Jobs" in sidebar(app)
    live.cluster.job_list.append(waiting_job())
    await app.model.refresh_now(*app.badge_watches)
    assert app.view.title == "Overview" and "  Jobs (1 running)" in sidebar(app)


async def test_jobs_are_listed_running_first_and_enter_shows_the_steps(app, live):
    await app.actions.scale("qwen-small", {"max": 3})  # a job the fake ends at once
    live.cluster.job_list.append(waiting_job())
    await open_view(app, "Jobs")
    text = screen(app)
    lines = text.splitlines()
    heading = next(i for i, line in enumerate(lines) if "MODEL" in line and "KIND" in line)
    assert lines[heading][25:].split() == ["MODEL", "KIND", "STATE", "STARTED", "BY", "NOW"]
    row = lines[heading + 1][25:].split()
    assert row[:3] == ["big-model", "add", "waiting"] and row[4:7] == ["ago", "ann", "waiting"]  # started 1d ago…
    assert lines[heading + 2][25:].split()[:5] == ["qwen-small", "scale", "done", "just", "now"]
    assert "Jobs since the leader started: 1 done, 1 waiting" in text

    await keys(app, "enter")
    text = screen(app)
    assert "Job job-7: add big-model" in text
    assert "waiting: waiting for room: no node can run it: gpu-a-01: needs 4 free GPUs, has 1" in text
    assert "started 2025-03-10 12:00 by ann" in text
    assert "12:00:00  ann added big-model to the catalog" in text
    assert "`llmgw ctl jobs job-7` follows it in a terminal." in text
    await keys(app, "enter")
    assert "Job job-7" not in screen(app)


async def test_without_jobs_the_table_says_none(app):
    await open_view(app, "Jobs")
    text = screen(app)
    assert "(none)" in text and "Jobs since the leader started: none" in text


async def test_an_engine_install_is_a_job_with_its_timed_steps(app, live):
    steps = [JobStep(at=T0, text="ann asked gpu-a-01 to install vllm 0.9.1"),
             JobStep(at=T0 + dt.timedelta(seconds=2), text="uv pip install vllm==0.9.1")]
    live.cluster.job_list.append(JobInfo(id="job-9", model="vllm on gpu-a-01", kind="engine", by="ann",
                                         state="running", now="uv pip install vllm==0.9.1", started=T0,
                                         steps=steps, node="gpu-a-01", engine="vllm"))
    await open_view(app, "Jobs")
    lines = screen(app).splitlines()
    heading = next(i for i, line in enumerate(lines) if "MODEL" in line and "KIND" in line)
    assert lines[heading + 1][25:].split()[:5] == ["vllm", "on", "gpu-a-01", "engine", "running"]
    await keys(app, "enter")
    text = screen(app)
    assert "Job job-9: engine vllm on gpu-a-01" in text
    assert "12:00:00  ann asked gpu-a-01 to install vllm 0.9.1" in text
    assert "12:00:02  uv pip install vllm==0.9.1" in text
