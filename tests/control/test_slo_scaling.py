"""SLO pressure: a model over its slo.ttft_p99 gets a replica more, though its replicas still have room."""

from __future__ import annotations

from .conftest import Harness, model, register


async def test_a_model_over_its_ttft_objective_gets_one_replica_more_up_to_max():
    h = Harness([model("slow", concurrency=8, scaling={"min": 1, "max": 2, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    [(_, first)] = await h.start_ready()
    over = {"slow": False}
    h.rec.slo_pressure = lambda name: over.get(name, False)
    await h.tick(1)
    assert h.agents.starts() == []  # room, and within its objective: nothing more
    assert h.replicas.get(first.shard_id).has_room()
    over["slow"] = True  # the gateway's window of first tokens is over the objective
    [(_, second)] = await h.start_ready()
    assert second.shard_id != first.shard_id and len(h.replicas.replicas_for("slow")) == 2
    await h.tick(1)
    assert h.agents.starts() == []  # scaling.max reached: no third


async def test_the_gateways_slo_watch_is_the_reconcilers_pressure_in_a_server(tmp_path, aiohttp_client):
    from llmgw.config.load import parse_server_config
    from llmgw.control.wiring import attach_control_plane
    from llmgw.router.gateway import GATEWAY
    from llmgw.server import make_gateway_app

    from .conftest import ENGINES
    from .test_service import free_port, until

    config = parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
        "store": {"dsn": str(tmp_path / "store.db")}, "auth": {"keys_required": False},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "slo": {"ttft_p99": "1s"}}],
    })
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1", admin=False)
    await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.reconciler is not None, timeout=5, what="started")
    pressure = slot.plane.reconciler.slo_pressure
    assert pressure is not None and not pressure("tiny")
    for _ in range(10):
        app[GATEWAY].slo.observe("tiny", 3.0)  # what a slow engine's streams would record
    assert pressure("tiny")
