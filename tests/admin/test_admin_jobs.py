"""GET /jobs and /jobs/{job} against the fake cluster: listed newest first, filtered, one shown, unknown named."""

from __future__ import annotations


async def test_changes_start_jobs_listed_filtered_and_shown(admin):
    scaled = await admin.call("POST", "/models/qwen-small/scale", {"max": 3})
    restarted = await admin.call("POST", "/models/qwen-small/restart", {"in_place": True})
    assert scaled["job"] == "job-1" and restarted["job"] == "job-2"
    assert (await admin.call("GET", "/models/qwen-small"))["job"] == "job-2"

    jobs = (await admin.call("GET", "/jobs"))["jobs"]
    assert [(j["id"], j["kind"], j["model"], j["state"]) for j in jobs] == [
        ("job-2", "restart", "qwen-small", "done"), ("job-1", "scale", "qwen-small", "done")]
    assert jobs[0]["by"] == "unknown" and jobs[0]["ended"] and jobs[0]["steps"][-1]["text"] == "done: 1 ready"
    assert (await admin.call("GET", "/jobs", params={"state": "running"}))["jobs"] == []
    assert len((await admin.call("GET", "/jobs", params={"state": "done", "model": "qwen-small"}))["jobs"]) == 2

    job = await admin.call("GET", "/jobs/job-1")
    assert job["kind"] == "scale" and [s["text"] for s in job["steps"]][0] == "unknown asked to scale qwen-small"


async def test_an_unknown_job_is_404_naming_it_and_a_bad_state_is_400(admin):
    assert "no job called 'job-nope'" in await admin.refused("GET", "/jobs/job-nope", status=404)
    error = await admin.refused("GET", "/jobs", params={"state": "sleeping"}, status=400)
    assert error == "state: one of running, waiting, done, failed, got 'sleeping'"
