"""What worker 0 sends the other workers (llmgw.server.workers): its replicas and models, taken up as they are."""

from __future__ import annotations

import pickle
import time
from types import SimpleNamespace

from llmgw.config import parse_server_config
from llmgw.config.secrets import Secret
from llmgw.router.catalog import Catalog
from llmgw.router.replicas import Replica, ReplicaSet
from llmgw.server.workers import apply, snapshot


def gateway(models: list[dict]) -> SimpleNamespace:
    config = parse_server_config({"models": models})
    replicas = ReplicaSet()
    return SimpleNamespace(replicas=replicas, catalog=Catalog(config.models, replicas))


def test_a_worker_takes_up_worker_0s_replicas_and_models_as_they_change():
    first = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]},
                     {"name": "b", "endpoints": [{"url": "http://e2:8000/v1"}]}])
    first.replicas.add(Replica("r1", "a", "http://10.0.0.1:8000/v1", api_key=Secret("engine-key"), source="control",
                               max_concurrency=8))
    first.replicas.add(Replica("r2", "b", "http://10.0.0.2:8000/v1", source="control"))
    worker = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    worker.replicas.add(Replica("gone", "a", "http://10.0.0.9:8000/v1", source="control"))
    worker.replicas.add(Replica("r1", "a", "http://10.0.0.1:8000/v1", source="control", in_flight=3))

    apply(worker, snapshot(first))
    assert sorted(r.id for r in worker.replicas) == ["r1", "r2"]
    r1 = worker.replicas.get("r1")
    assert r1.api_key.reveal() == "engine-key" and r1.max_concurrency == 8
    assert r1.in_flight == 3  # its own requests in flight are its own
    assert [m.name for m in worker.catalog.configs] == ["a", "b"]

    first.replicas.update("r2", base_url="http://10.0.0.3:8000/v1")
    first.replicas.remove("r1")
    apply(worker, snapshot(first))
    assert [(r.id, r.base_url) for r in worker.replicas] == [("r2", "http://10.0.0.3:8000/v1")]


def test_worker_0_counts_a_workers_use_of_a_replica_for_its_idle_reckoning():
    from llmgw.server.workers import take_use, use_report

    first = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    first.replicas.add(Replica("r1", "a", "http://10.0.0.1:8000/v1", source="control"))
    first.replicas.add(Replica("r2", "a", "http://10.0.0.2:8000/v1", source="control"))
    worker = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    apply(worker, snapshot(first))
    since = time.monotonic()
    assert use_report(worker, since) == {}  # nothing sent: nothing to say
    worker.replicas.get("r1").last_chosen = time.monotonic()  # the worker chose it since the last report...
    worker.replicas.get("r2").in_flight = 1  # ...and has one in flight on the other now
    report = use_report(worker, since)
    assert set(report) == {"r1", "r2"} and report["r2"] == 0.0
    take_use(first, pickle.dumps(report))
    now = time.monotonic()
    assert now - first.replicas.get("r2").last_chosen < 0.5  # in flight in the worker: used now
    assert 0 <= now - first.replicas.get("r1").last_chosen < 0.5
    assert first.replicas.get("r1").in_flight == 0  # worker 0's own count of its requests is its own


async def test_a_workers_get_leader_answers_what_worker_0s_does(aiohttp_client):
    from aiohttp import web

    from llmgw.server import workers

    first = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    first.control = SimpleNamespace(plane=None, disabled_reason="control.enabled is false")
    app = web.Application()
    workers.serve_leader(app)
    client = await aiohttp_client(app)
    workers._leader_seen = None
    resp = await client.get("/leader")
    assert resp.status == 503 and "no word from worker 0" in (await resp.json())["error"]
    worker = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    apply(worker, snapshot(first))
    resp = await client.get("/leader")
    assert resp.status == 503 and (await resp.json())["error"] == "control.enabled is false"
    leading = {"leader": True, "holder": "cp-1", "epoch": 3}
    first.control = SimpleNamespace(plane=SimpleNamespace(leadership=SimpleNamespace(describe=lambda: leading)))
    apply(worker, snapshot(first))
    resp = await client.get("/leader")
    assert resp.status == 200 and await resp.json() == leading


def test_a_worker_says_why_no_replica_serves_as_worker_0_does():
    first = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    worker = gateway([{"name": "a", "endpoints": [{"url": "http://e1:8000/v1"}]}])
    first.replicas.unavailable_reason = "this standby's copy of the leader's replicas is 7 s old"
    apply(worker, snapshot(first))
    assert worker.replicas.unavailable_reason == "this standby's copy of the leader's replicas is 7 s old"
    first.replicas.unavailable_reason = ""
    apply(worker, snapshot(first))
    assert worker.replicas.unavailable_reason == ""
