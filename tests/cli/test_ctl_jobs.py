"""`llmgw ctl jobs` against a live admin API over a fake cluster: the table, --json, following one to its end."""

from __future__ import annotations

import datetime as dt

import attrs
from ctl_live import ctl, ok, ok_json, refused
from test_ctl_cluster import live  # noqa: F401 - the fixture

from llmgw.admin.cluster_types import JobInfo, JobStep
from llmgw.cli import ctl_jobs

T0 = dt.datetime(2025, 3, 10, 12, 0, 0, tzinfo=dt.UTC)


def running_job() -> JobInfo:
    return JobInfo(id="job-9", model="qwen-small", kind="scale", by="ann", state="running",
                   now="fetching weights on gpu-a-02: 1 GiB of 4 GiB (25%)", started=T0,
                   steps=[JobStep(at=T0, text="ann scaled qwen-small"),
                          JobStep(at=T0 + dt.timedelta(seconds=2),
                                  text="replica qwen-small-0002 placed on gpu-a-02 (no replica of it there)")])


def test_jobs_are_listed_running_first_with_json_and_filters(capsys, live):
    ok(capsys, "model", "scale", "qwen-small", "--max", "3")
    live.cluster.job_list.append(running_job())
    lines = ok(capsys, "jobs").splitlines()
    assert lines[0].split() == ["JOB", "MODEL", "KIND", "STATE", "STARTED", "BY", "NOW"]
    assert lines[1].split()[:4] == ["job-9", "qwen-small", "scale", "running"]
    assert "2025-03-10 12:00:00  ann" in lines[1] and lines[1].endswith("(25%)")
    assert lines[2].split()[:4] == ["job-1", "qwen-small", "scale", "done"]
    assert [j["id"] for j in ok_json(capsys, "jobs", "--state", "done")["jobs"]] == ["job-1"]
    assert ok_json(capsys, "jobs", "--model", "other")["jobs"] == []


def test_one_job_is_followed_until_it_ends(capsys, live, monkeypatch):
    live.cluster.job_list.append(running_job())
    reads = []

    def wait(seconds: float) -> None:  # the job moves on between two reads
        reads.append(seconds)
        job = live.cluster.job_list[-1]
        more = [JobStep(at=T0 + dt.timedelta(seconds=30), text="replica qwen-small-0002 ready on gpu-a-02")]
        if len(reads) == 2:
            more.append(JobStep(at=T0 + dt.timedelta(seconds=31), text="done: 2 of 2 ready"))
        live.cluster.job_list[-1] = attrs.evolve(job, steps=[*job.steps[:2], *more], now=more[-1].text,
                                                 state="done" if len(reads) == 2 else "running")

    monkeypatch.setattr(ctl_jobs, "_wait", wait)
    out = ok(capsys, "jobs", "job-9")
    assert reads == [ctl_jobs.FOLLOW_INTERVAL] * 2
    assert out.splitlines() == [
        "job-9: scale qwen-small, started 2025-03-10 12:00:00 by ann",
        "  12:00:00  ann scaled qwen-small",
        "  12:00:02  replica qwen-small-0002 placed on gpu-a-02 (no replica of it there)",
        "            fetching weights on gpu-a-02: 1 GiB of 4 GiB (25%)",
        "  12:00:30  replica qwen-small-0002 ready on gpu-a-02",
        "  12:00:31  done: 2 of 2 ready",
    ]


def test_no_follow_prints_once_a_failed_job_exits_1_and_an_unknown_one_is_refused(capsys, live):
    live.cluster.job_list.append(running_job())
    out = ok(capsys, "jobs", "job-9", "--no-follow")
    assert out.splitlines()[-2:] == [
        "  12:00:02  replica qwen-small-0002 placed on gpu-a-02 (no replica of it there)",
        "running: fetching weights on gpu-a-02: 1 GiB of 4 GiB (25%)"]
    assert ok_json(capsys, "jobs", "job-9")["state"] == "running"
    failed = attrs.evolve(running_job(), id="job-10", state="failed", now="failed: parked after 5 failed starts")
    live.cluster.job_list.append(failed)
    code, out, _ = ctl(capsys, "jobs", "job-10")
    assert code == 1 and out.splitlines()[-1].endswith("placed on gpu-a-02 (no replica of it there)")
    assert "no job called 'job-nope'" in refused(capsys, "jobs", "job-nope")


def test_a_restart_says_which_job_follows_it(capsys, live):
    out = ok(capsys, "model", "restart", "qwen-small")
    assert out.splitlines()[-1] == "  job job-1: `llmgw ctl jobs job-1` follows it"
