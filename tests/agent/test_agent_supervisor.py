"""The supervisor with real processes: the sim engine (`python -m llmgw sim-engine`) and a stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest
from agent_helpers import KEY, fake_plan, free_port, sim_plan

from llmgw.agent import procs
from llmgw.agent.supervisor import EXITED, FAILED, READY, STARTING, STOPPED, STOPPING, SupervisorError
from llmgw.plugins.types import LaunchPlan


async def get_status(port: int, path: str = "/health", key: str = KEY) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {key}"}) as r:
            return r.status


async def test_sim_engine_starts_answers_and_stops_gracefully(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("s1", sim_plan(port), port=port, api_key=KEY, model="tiny-sim", engine="sim",
                            start_timeout=30)
    assert shard.state == READY, shard.message
    assert procs.is_alive(shard.ident)
    # It is a session leader: signals to the agent's group never reach it.
    assert os.getsid(shard.pid) == shard.pid and os.getpgid(shard.pid) == shard.pid
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                             json={"model": "tiny-sim", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 3}) as r:
            assert r.status == 200
        async with http.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                             json={"model": "tiny-sim", "messages": []}) as r:
            assert r.status == 401  # the key went in by environment, and the engine demands it

    stopped = await sup.stop("s1", grace=10)
    assert stopped.state == STOPPED and stopped.exit_code == 0, stopped.message
    assert not procs.is_alive(shard.ident)
    states = [s for sid, s, _ in make_supervisor.changes if sid == "s1"]
    assert states == [STARTING, READY, STOPPING, STOPPED]
    record = json.loads((sup.records_dir / "s1.json").read_text())
    assert record["state"] == STOPPED and oct((sup.records_dir / "s1.json").stat().st_mode & 0o777) == "0o600"
    assert any("listening on" in line for line in shard.logs())


async def test_an_engine_that_crashes_while_starting_fails_with_its_exit_code_and_output(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("crash", fake_plan(port, "--crash", "3"), port=port, api_key=KEY, start_timeout=10)
    assert shard.state == FAILED
    assert shard.exit_code == 3
    assert shard.message == "exited with code 3 before it was ready"
    assert any("crashing as asked" in line for line in shard.logs())


async def test_an_engine_that_dies_after_ready_is_reported_exited(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("dies", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    assert shard.state == READY
    os.kill(shard.pid, signal.SIGKILL)
    await asyncio.wait_for(shard._exited.wait(), 5)
    assert shard.state == EXITED and shard.exit_code == -signal.SIGKILL
    assert shard.message == "killed by SIGKILL"


async def test_an_engine_that_never_answers_fails_after_its_start_timeout_and_is_killed(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("slow", fake_plan(port, "--never-ready"), port=port, api_key=KEY, start_timeout=1.0)
    assert shard.state == FAILED
    assert "not ready within 1 s" in shard.message
    assert not procs.is_alive(shard.ident)


async def test_readiness_needs_the_key(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    plan = fake_plan(port, key="the-engine-wants-this")
    shard = await sup.start("key", plan, port=port, api_key="but-the-agent-has-that", start_timeout=1.0)
    assert shard.state == FAILED and "never answered 200" in shard.message


async def test_sigterm_ignored_means_sigkill_after_the_grace(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    shard = await sup.start("stubborn", fake_plan(port, "--ignore-term"), port=port, api_key=KEY, start_timeout=10)
    assert shard.state == READY
    stopped = await sup.stop("stubborn", grace=0.5)
    assert stopped.state == STOPPED and stopped.exit_code == -signal.SIGKILL
    assert any("ignoring SIGTERM" in line for line in stopped.logs())


async def test_a_ready_check_can_refuse_an_engine(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    def check(lines: list[str]) -> str | None:
        return "it said the wrong thing" if any("fake engine" in x for x in lines) else None

    shard = await sup.start("checked", fake_plan(port), port=port, api_key=KEY, start_timeout=10, check_ready=check)
    assert shard.state == FAILED and shard.message == "it said the wrong thing"
    assert not procs.is_alive(shard.ident)


async def test_a_missing_program_fails_in_words(make_supervisor):
    sup = make_supervisor()
    plan = LaunchPlan(argv=["llmgw-no-such-engine", "--port", "1"], env={})
    shard = await sup.start("missing", plan, port=1, api_key=KEY)
    assert shard.state == FAILED
    assert shard.message == "llmgw-no-such-engine is not installed on this node (not found on PATH)"


async def test_dollar_references_in_argv_come_from_the_plan_env_only(make_supervisor, monkeypatch):
    sup = make_supervisor()
    monkeypatch.setenv("AGENT_ONLY", "agent")
    port = free_port()
    plan = fake_plan(port, "--greeting=${GREETING}", env={"GREETING": "hello-from-env"})
    shard = await sup.start("expand", plan, port=port, api_key=KEY, start_timeout=10)
    assert shard.state == READY
    assert any("--greeting=hello-from-env" in line for line in shard.logs())
    # The record keeps the plan as given: the value is not written out expanded.
    assert "--greeting=${GREETING}" in json.loads((sup.records_dir / "expand.json").read_text())["plan"]["argv"]

    bad = fake_plan(free_port(), "--x=${AGENT_ONLY}")
    failed = await sup.start("bad", bad, port=1, api_key=KEY)
    assert failed.state == FAILED and "${AGENT_ONLY}" in failed.message


async def test_the_log_ring_keeps_the_last_lines_and_the_file_rotates(make_supervisor):
    sup = make_supervisor(ring_size=5, log_max_bytes=2000, log_keep=2)
    port = free_port()
    shard = await sup.start("chatty", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    for _ in range(40):
        assert await get_status(port) == 200
    await asyncio.sleep(0.3)
    lines = shard.logs()
    assert len(lines) == 5 and all("GET /health" in x for x in lines)
    assert shard.log_path.with_name("chatty.log.1").exists()
    assert shard.log_path.stat().st_size < 3000


async def test_a_shard_cannot_be_started_twice(make_supervisor):
    sup = make_supervisor()
    port = free_port()
    await sup.start("once", fake_plan(port), port=port, api_key=KEY, start_timeout=10)
    with pytest.raises(SupervisorError, match="already ready"):
        await sup.start("once", fake_plan(port), port=port, api_key=KEY)


def test_the_agents_secrets_stay_out_of_engine_environments():
    env = procs.engine_environment({"LLAMA_API_KEY": "k"}, base={"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x",
                                                                  "LLMGW_ADMIN_TOKEN": "t", "HOME": "/root"})
    assert env == {"PATH": "/bin", "HOME": "/root", "LLAMA_API_KEY": "k"}


def test_process_identity_tells_a_reused_pid_apart():
    me = procs.identify(os.getpid())
    assert me is not None and procs.is_alive(me)
    assert not procs.is_alive(procs.ProcessIdentity(me.pid, me.start_ticks + 1, me.boot_id))
    assert not procs.is_alive(procs.ProcessIdentity(me.pid, me.start_ticks, "another-boot"))


def test_read_last_lines(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n" for i in range(10000)))
    assert procs.read_last_lines(path, 3) == ["line 9997", "line 9998", "line 9999"]
    assert procs.read_last_lines(tmp_path / "none", 3) == []


def test_stat_parsing_survives_odd_command_names(tmp_path):
    (tmp_path / "42").mkdir()
    fields = ["S", "1", "42", "42", "0", "-1", "4194560"] + ["0"] * 4 + ["7", "3"] + ["0"] * 6 + ["123456"]
    (tmp_path / "42" / "stat").write_text("42 (a) b (c) " + " ".join(fields) + " 0 0\n")
    stat = procs.proc_stat(42, proc=str(tmp_path))
    assert stat is not None
    got = (stat.state, stat.pgrp, stat.session, stat.utime, stat.stime, stat.start_ticks)
    assert got == ("S", 42, 42, 7, 3, 123456)




async def test_a_worker_rank_without_a_ready_path_is_up_while_it_runs(make_supervisor):
    # A headless rank of a replica over several nodes serves no HTTP: running is all it can show.
    sup = make_supervisor()
    port = free_port()
    plan = LaunchPlan(argv=["sleep", "30"], env={}, ready_path="", metrics_path=None)
    shard = await sup.start("worker", plan, port=port, api_key=KEY, start_timeout=10)
    assert shard.state == READY
    os.kill(shard.pid, signal.SIGKILL)
    await asyncio.wait_for(shard._exited.wait(), 5)
    assert shard.state == EXITED
