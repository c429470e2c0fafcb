"""A new supervisor on the same state directory takes over running engines without restarting them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import aiohttp
from agent_helpers import KEY, fake_plan, free_port, kill_pid, sim_plan

from llmgw.agent import procs
from llmgw.agent.supervisor import EXITED, FAILED, READY, STARTING, STOPPED


class Prober:
    """Asks an engine for /health every 50 ms until stopped; counts what did not answer 200."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/health"
        self.ok = 0
        self.failures: list[str] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                try:
                    async with http.get(self.url, headers={"Authorization": f"Bearer {KEY}"}) as r:
                        if r.status == 200:
                            self.ok += 1
                        else:
                            self.failures.append(f"HTTP {r.status}")
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    self.failures.append(repr(exc))
                await asyncio.sleep(0.05)

    def __enter__(self) -> Prober:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_a_new_supervisor_adopts_a_running_sim_engine_that_never_stops_answering(make_supervisor):
    first = make_supervisor()
    port = free_port()
    shard = await first.start("sim-1", sim_plan(port), port=port, api_key=KEY, model="tiny-sim", engine="sim",
                              start_timeout=30)
    assert shard.state == READY
    pid, ident = shard.pid, shard.ident

    with Prober(port) as prober:
        await asyncio.sleep(0.3)
        # The agent dies as under kill -9: nothing is stopped, nothing is said.
        await first.close()
        await asyncio.sleep(0.3)
        second = make_supervisor()
        adopted = await second.adopt()
        await asyncio.sleep(0.3)

    assert [s.shard_id for s in adopted] == ["sim-1"]
    taken = second.get("sim-1")
    assert taken.state == READY and taken.adopted and taken.pid == pid
    assert taken.message == "adopted: it kept serving"
    assert (taken.model, taken.engine, taken.port) == ("tiny-sim", "sim", port)
    assert procs.is_alive(ident)
    assert prober.failures == [] and prober.ok > 10
    # The earlier output is in the ring, read back from the log file.
    assert any("listening on" in line for line in taken.logs())

    stopped = await second.stop("sim-1", grace=10)
    assert stopped.state == STOPPED
    assert not procs.is_alive(ident)


async def test_an_adopted_engines_output_keeps_arriving_in_the_ring(make_supervisor):
    first = make_supervisor()
    port = free_port()
    await first.start("talker", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    await first.close()
    second = make_supervisor()
    await second.adopt()
    taken = second.get("talker")
    before = len([x for x in taken.logs() if "GET /health" in x])
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            async with http.get(f"http://127.0.0.1:{port}/health", headers={"Authorization": f"Bearer {KEY}"}):
                pass
    await asyncio.sleep(0.3)
    after = len([x for x in taken.logs() if "GET /health" in x])
    assert after >= before + 3


async def test_an_engine_that_died_while_no_agent_watched_is_reported_exited(make_supervisor):
    first = make_supervisor()
    port = free_port()
    shard = await first.start("gone", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    await first.close()
    kill_pid(shard.pid)
    second = make_supervisor()
    await second.adopt()
    dead = second.get("gone")
    assert dead.state == EXITED
    assert "ended while no agent was watching" in dead.message
    second.forget("gone")
    assert not (second.records_dir / "gone.json").exists()


async def test_a_reused_pid_is_not_taken_for_the_engine_nor_signalled(make_supervisor):
    first = make_supervisor()
    port = free_port()
    shard = await first.start("reuse", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    await first.close()
    kill_pid(shard.pid)
    # Another program now has the pid the record names.
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        record_path = first.records_dir / "reuse.json"
        record = json.loads(record_path.read_text())
        record["pid"] = stranger.pid
        record_path.write_text(json.dumps(record))
        second = make_supervisor()
        await second.adopt()
        taken = second.get("reuse")
        assert taken.state == EXITED
        assert f"pid {stranger.pid} is another program's now" in taken.message
        await second.stop("reuse")  # over already: nothing is signalled
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


async def test_an_engine_still_starting_is_waited_for_after_adoption(make_supervisor):
    first = make_supervisor()
    port = free_port()
    task = asyncio.create_task(first.start("late", fake_plan(port, "--ready-after", "1.5"), port=port, api_key=KEY,
                                           start_timeout=20))
    await asyncio.sleep(0.5)
    task.cancel()
    await first.close()
    second = make_supervisor()
    await second.adopt(answer_timeout=0.2)
    taken = second.get("late")
    assert taken.state == STARTING
    settled = await asyncio.wait_for(second.wait_settled("late"), 10)
    assert settled.state == READY


async def test_an_engine_whose_pid_was_never_written_is_found_by_its_environment(make_supervisor, state_dir):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("lost-pid", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    await sup.close()
    record_path = sup.records_dir / "lost-pid.json"
    record = json.loads(record_path.read_text())
    record.update(pid=None, start_ticks=None, state=STARTING)
    record_path.write_text(json.dumps(record))
    second = make_supervisor()
    await second.adopt()
    taken = second.get("lost-pid")
    assert taken.pid == shard.pid and taken.state == READY


async def test_adoption_runs_the_ready_check_too(make_supervisor):
    first = make_supervisor()
    port = free_port()
    await first.start("recheck", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    await first.close()
    second = make_supervisor()
    await second.adopt(check_for=lambda shard: (lambda lines: "computes in the wrong place"))
    taken = second.get("recheck")
    assert taken.state == FAILED and taken.message == "computes in the wrong place"
    deadline = time.monotonic() + 5
    while procs.is_alive(taken.ident) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not procs.is_alive(taken.ident)
