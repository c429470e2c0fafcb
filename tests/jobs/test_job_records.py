"""A driven job kept in the store stage by stage, handed over when its leader stops leading, and carried on (or
ended safely) by the next one, through the real JobDriver and a real store."""

from __future__ import annotations

import asyncio

import attrs
import pytest

from llmgw.control.job_driver import JOB_RECORD_PREFIX, JobDriver, JobRecord, JobStopped, load_records
from llmgw.control.jobs import Jobs
from llmgw.store import open_store


@attrs.define
class Leadership:
    epoch: int


@attrs.define
class Plane:
    """What a JobDriver reads of its control plane."""

    store: object
    holder: str
    leadership: Leadership
    jobs: Jobs = attrs.Factory(Jobs)


class TwoStages(JobDriver):
    """A job of two stages; the second waits for `go`. Resumes from "second"; ends safely from "broken"."""

    kinds = ("serve",)

    def __init__(self, plane) -> None:
        super().__init__(plane)
        self.go = asyncio.Event()
        self.ran: list[str] = []

    async def start(self, model: str) -> object:
        job = self._job(model, "serve", "ann", f"ann asked to serve {model}")
        await self._record(job, "first", model=model)
        self._run(model, job, self._work(job))
        return job

    async def _work(self, job, stage: str = "first") -> None:
        if stage == "first":
            self.ran.append("first")
            await self._record(job, "second", half="done")
        self.ran.append("second")
        await self.go.wait()
        self.plane.jobs.end(job, "done", f"{job.model} serves")

    async def _resume(self, job, record):
        if record.stage == "broken":
            raise JobStopped(f"{job.model} was left as it is")
        assert record.args == {"model": job.model, "half": "done"}
        return self._work(job, record.stage)


async def _settle(driver, job) -> None:
    """Until the job's task has ended (its record removed)."""
    await asyncio.wait_for(driver._tasks[job.model], 5)


@pytest.fixture
async def store(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    yield store
    await store.close()


async def test_a_job_handed_over_is_carried_on_by_the_next_leader_from_its_stage_and_says_so(store):
    first = TwoStages(Plane(store, "cp-a", Leadership(1)))
    job = await first.start("chat")
    await asyncio.sleep(0.05)
    [record] = await load_records(store)
    assert (record.id, record.kind, record.stage, record.holder, record.epoch) == (job.id, "serve", "second",
                                                                                  "cp-a", 1)
    await first.hand_over()  # cp-a stops leading: its copy says so, the record stays
    assert job.state == "failed" and job.now.startswith("failed: handed over: this control plane stopped leading")
    assert [r.id for r in await load_records(store)] == [job.id]

    second = TwoStages(Plane(store, "cp-b", Leadership(2)))
    [again] = await second.take_over()
    assert again.id == job.id and again.active
    assert again.steps[0].text == "ann asked to serve chat"
    assert again.steps[-1].text == ("resumed by cp-b after cp-a (epoch 1) lost the lease, from its stage "
                                    "'second'")
    await asyncio.sleep(0.05)
    assert second.ran == ["second"]  # the first stage, recorded as done, is not run again
    assert (await load_records(store))[0].holder == "cp-b"
    second.go.set()
    await _settle(second, again)
    assert again.state == "done"
    assert again.now == "done: chat serves (resumed by cp-b after cp-a (epoch 1) lost the lease)"
    await asyncio.sleep(0.05)
    assert await load_records(store) == []  # ended: nothing left for a third leader
    assert await second.take_over() == []


async def test_a_job_that_cannot_go_on_is_ended_safely_in_words_and_its_record_removed(store):
    plane = Plane(store, "cp-b", Leadership(3))
    record = JobRecord(id="job-abc123", kind="serve", model="chat", by="ann", started=1.0, stage="broken",
                       steps=[{"at": 1.0, "text": "ann asked to serve chat"}], holder="cp-a", epoch=2)
    await store.set_setting(record.key, record.to_json(), actor="test")
    [job] = await TwoStages(plane).take_over()
    assert job.state == "failed"
    assert job.now == "failed: chat was left as it is (ended safely by cp-b after cp-a (epoch 2) lost the lease)"
    assert plane.jobs.get("job-abc123") is job
    assert await load_records(store) == []


async def test_only_records_of_its_own_kinds_are_taken_and_a_damaged_one_is_left_in_the_store(store):
    update = JobRecord(id="job-000001", kind="update", model="chat", by="ann", started=1.0, stage="starting")
    await store.set_setting(update.key, update.to_json(), actor="test")
    await store.set_setting(JOB_RECORD_PREFIX + "job-000002", {"kind": "serve"}, actor="test")
    assert await TwoStages(Plane(store, "cp-b", Leadership(2))).take_over() == []
    assert [r.id for r in await load_records(store)] == ["job-000001"]
    assert (await store.get_setting(JOB_RECORD_PREFIX + "job-000002")) is not None
    assert JobRecord.from_json(update.to_json()) == update
    assert JobRecord.from_json({"id": "x"}) is None


async def test_a_job_called_off_by_an_operator_is_ended_and_forgotten_not_handed_over(store):
    driver = TwoStages(Plane(store, "cp-a", Leadership(1)))
    job = await driver.start("chat")
    await asyncio.sleep(0.05)
    driver.cancel("chat")
    await asyncio.sleep(0.05)
    assert job.now == "failed: stopped: the change was called off"
    assert await load_records(store) == []
