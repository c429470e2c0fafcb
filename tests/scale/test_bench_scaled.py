"""`llmgw bench gateway --gateways N --workers W`: its parts that need no process (which setups, the load split
over the gateways, the report's ratios, a gateway's server.yaml), its refusals through the CLI, and (slow) a
small run through the CLI on real processes: a PostgreSQL, a Redis, the control planes and their workers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from llmgw.bench import gateway, gateway_scaled
from llmgw.bench.stats import Outcome
from llmgw.cli.main import main
from llmgw.config import parse_server_config


def test_the_setups_measured_beside_one_process():
    assert gateway_scaled.setups(3, 1) == [(3, 1)]
    assert gateway_scaled.setups(2, 2) == [(2, 1), (2, 2)]
    assert gateway_scaled.setups(1, 4) == [(1, 4)]
    assert [gateway_scaled.setup_name(*s) for s in gateway_scaled.setups(2, 2)] == ["llmgw-2g", "llmgw-2g2w"]
    with pytest.raises(gateway.BenchError, match="the one process itself"):
        gateway_scaled.setups(1, 1)
    with pytest.raises(gateway.BenchError, match="at least 1"):
        gateway_scaled.setups(0, 2)


def test_the_load_is_split_evenly_and_loads_at_once_take_the_longest_time():
    assert gateway_scaled.split(10, 3) == [4, 3, 3] and gateway_scaled.split(None, 2) == [None, None]
    a = Outcome(latencies=[(0.01, 1.0)], ok=100, elapsed=2.0)
    b = Outcome(latencies=[(0.02, 1.0)], ok=50, elapsed=1.0)
    b.fail("HTTP 503")
    both = gateway_scaled.concurrent([a, b])
    assert (both.ok, both.errors, both.elapsed, both.rps) == (150, 1, 2.0, 75.0)


def test_a_scaled_gateways_server_yaml_is_a_valid_control_plane_on_the_shared_store_and_redis(tmp_path):
    raw = gateway_scaled.control_plane_yaml(
        listen="127.0.0.1:9000", workdir=tmp_path / "llmgw-2g2w" / "0", dsn="postgres://u@127.0.0.1:5432/db",
        redis_url="redis://127.0.0.1:6379/0", engine_url="http://127.0.0.1:8000", keys=True, concurrency=50,
        workers=2)
    config = parse_server_config(raw)
    assert config.workers == 2 and config.control.enabled and config.limits.store == "redis://127.0.0.1:6379/0"
    assert raw["store"] == {"dsn": "postgres://u@127.0.0.1:5432/db"}
    assert raw["admin_token_file"] == str(tmp_path / "cluster" / "admin-token")  # one per cluster: one key hash


def _report() -> dict:
    targets = {
        "direct": {"rps": 1000.0, "ok": 10, "errors": 0},
        "llmgw": {"rps": 100.0, "ok": 10, "errors": 0, "cpu_ms_per_req": 2.0, "rps_vs_direct": 0.1,
                  "added_p50_ms": 1.0, "added_p99_ms": 2.0},
        "llmgw-2g2w": {"rps": 180.0, "ok": 10, "errors": 0, "cpu_ms_per_req": 3.0},
    }
    bench = gateway.GatewayBench(requests=30, rounds=1, workers=2)
    out = {"bench": "gateway", "settings": {**__import__("attrs").asdict(bench), "requests": 30, "loop": "closed",
                                            "gateways": 2},
           "machine": {"cpus": 2, "load_avg_at_start": [1.0, 1.0, 1.0]}, "load_generator": "wrk", "notes": [],
           "targets": targets}
    for name in ("llmgw-2g2w",):
        targets[name].update(gateways=2, workers=2, rps_vs_one_process=1.8, cpu_vs_one_process=1.5)
    return out


def test_the_table_shows_each_setups_shape_and_its_ratios_to_one_process():
    rows, columns = gateway_scaled.table(_report())
    assert columns[:5] == ["target", "gateways", "workers", "rps", "rps_vs_one_process"]
    assert columns[-1] == "cpu_vs_one_process"
    one = next(r for r in rows if r["target"] == "llmgw")
    assert (one["gateways"], one["workers"], one["rps_vs_one_process"]) == (1, 1, 1.0)
    lines = gateway_scaled.headline(_report())
    assert any("llmgw-2g2w (2 control planes x 2 worker(s)" in line and "1.8x one process's requests/s" in line
               and "1.5x its CPU a request" in line for line in lines)


def test_the_cli_refuses_a_setup_that_is_the_one_process_and_names_the_flag(capsys):
    assert main(["bench", "gateway", "--gateways", "1", "--store", "postgres://x@127.0.0.1/db"]) == 2
    assert "--gateways 1 --workers 1 is the one process itself" in capsys.readouterr().err
    assert main(["bench", "gateway", "--gateways", "0"]) == 2
    assert "--gateways and --workers must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is missing: apt-get install redis-server")
def test_bench_gateway_with_two_gateways_and_two_workers_runs_every_setup_side_by_side(tmp_path):
    from llmgw.bench.postgres import find_bin

    if find_bin() is None:
        pytest.skip("Debian's postgresql is missing: apt-get install postgresql")
    done = subprocess.run([sys.executable, "-m", "llmgw", "bench", "gateway", "--gateways", "2", "--workers", "2",
                           "--requests", "90", "--rounds", "1", "--warmup", "10", "--concurrency", "6", "--json"],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["settings"]["gateways"] == 2 and report["settings"]["store"] == "throw-away PostgreSQL"
    t = report["targets"]
    assert list(t) == ["direct", "llmgw", "llmgw-2g", "llmgw-2g2w"]
    for name in ("llmgw-2g", "llmgw-2g2w"):
        assert t[name]["errors"] == 0 and t[name]["ok"] >= 90, t[name]
        assert t[name]["rps_vs_one_process"] > 0 and t[name]["cpu_ms_per_req"] > 0
    assert (t["llmgw-2g2w"]["gateways"], t["llmgw-2g2w"]["workers"]) == (2, 2)
    assert t["llmgw-2g2w"]["rss_mb_before"] > t["llmgw-2g"]["rss_mb_before"]  # four processes against two


@pytest.mark.slow  # three openings of a store: a second or more on a busy machine
async def test_a_given_store_can_be_benchmarked_again_and_keeps_no_usable_key(tmp_path):
    from llmgw.auth.keys import KeyResolver
    from llmgw.auth.principal import AuthError
    from llmgw.store import open_store

    dsn = str(tmp_path / "llmgw.db")
    first, first_id = await gateway_scaled.bench_key(dsn)
    second, second_id = await gateway_scaled.bench_key(dsn)  # the project is there already: a new key in it
    assert first != second and first_id != second_id
    for key_id in (first_id, second_id):
        await gateway_scaled.revoke(dsn, key_id)
    store = await open_store(dsn)
    try:
        with pytest.raises(AuthError) as refused:
            await KeyResolver(store).resolve(second)
        assert refused.value.status == 401
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is missing: apt-get install redis-server")
def test_bench_gateway_on_a_given_store_leaves_its_key_revoked(postgres_server):
    import asyncio

    dsn = postgres_server.dsn(postgres_server.create_database())
    done = subprocess.run([sys.executable, "-m", "llmgw", "bench", "gateway", "--gateways", "2", "--store", dsn,
                           "--requests", "40", "--rounds", "1", "--warmup", "5", "--concurrency", "4", "--json"],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["settings"]["store"] == "given" and list(report["targets"]) == ["direct", "llmgw", "llmgw-2g"]
    assert report["targets"]["llmgw-2g"]["errors"] == 0

    async def keys() -> list:
        from llmgw.auth.tenancy import Tenancy
        from llmgw.store import open_store

        store = await open_store(dsn)
        try:
            return await Tenancy(store, actor="test").list_keys(project="bench/load", include_unusable=True)
        finally:
            await store.close()

    found = asyncio.run(keys())
    assert len(found) == 1 and found[0].revoked_at is not None, found


def test_each_control_plane_on_one_machine_keeps_its_state_where_llmgw_state_dir_says(tmp_path, monkeypatch):
    import types

    from llmgw.store.state_dir import POSTGRES_STATE_DIR, STATE_DIR_ENV, state_dir, state_dir_of

    postgres = types.SimpleNamespace(dialect="postgres")
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    assert state_dir_of(postgres) == str(tmp_path) == state_dir("postgres://u@127.0.0.1/db")
    assert state_dir_of(types.SimpleNamespace(dialect="sqlite", path=str(tmp_path / "s" / "llmgw.db"))) is None
    monkeypatch.delenv(STATE_DIR_ENV)
    assert state_dir("postgres://u@127.0.0.1/db") in (POSTGRES_STATE_DIR, None)  # as before: the machine's folder
