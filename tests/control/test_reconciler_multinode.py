"""A replica over several nodes, run by the reconciler as one: a start per rank with rank 0's address, ready
when rank 0 is, down and back up whole when one shard goes, and every shard stopped when it is scaled away."""

from __future__ import annotations

import attrs

from llmgw.control.explain import explain, explain_text
from llmgw.control.reconciler import CRASH_WINDOW
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import Harness, control, gpus, register

FABRIC = "ib:fe80:0000:0000:0000/0x7fff"
SPEC = {"name": "llama-405b", "engine": "vllm", "source": "meta-llama/Llama-3.1-405B-Instruct",
        "profiles": [{"name": "h100x16", "gpus": 8, "gpu_class": "h100-80gb", "nodes": 2,
                      "tensor_parallel": 8, "pipeline_parallel": 2}],
        "scaling": {"min": 1, "max": 1}}


def gpu_node(node_id: str, address: str, fabric: str = FABRIC) -> w.Register:
    reg = register(node_id, gpu=gpus(8), address=address)
    return attrs.evolve(reg, inventory=attrs.evolve(reg.inventory, fabrics=(fabric,) if fabric else ()))


async def up(h: Harness) -> tuple[w.StartShard, tuple[str, w.StartShard]]:
    """One pass places the replica; rank 0 says where it meets the others; the next pass starts rank 1."""
    await h.tick()
    [(head_node, head)] = h.agents.starts()  # rank 1 waits for rank 0's port
    assert head_node == "gpu-01"
    h.status(head_node, head.shard_id, "starting", port=h.port_for(head), dist_port=29500)
    await h.tick()
    [(worker_node, worker)] = h.agents.starts()
    return head, (worker_node, worker)


async def up_and_ready(h: Harness) -> tuple[w.StartShard, tuple[str, w.StartShard]]:
    """`up`, then both shards say they are ready (rank 1 first): the replica serves."""
    head, (worker_node, worker) = await up(h)
    h.status(worker_node, worker.shard_id, "ready")
    h.status("gpu-01", head.shard_id, "ready", port=h.port_for(head))
    return head, (worker_node, worker)


async def harness(tmp_path, **config):
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    h = Harness([], store=store, config=control(**config) if config else None)
    await h.catalog.add(SPEC, actor="test")
    h.connect(gpu_node("gpu-01", "10.1.0.1"))
    h.connect(gpu_node("gpu-02", "10.1.0.2"))
    h.connect(gpu_node("gpu-03", "10.9.0.3", fabric="roce:10.9.0.0/16"))  # another fabric: never with the others
    return h, store


async def test_each_rank_is_started_with_rank_0s_address_and_the_replica_is_ready_with_rank_0(tmp_path):
    h, store = await harness(tmp_path)
    try:
        head, (worker_node, worker) = await up(h)
        assert (head.nnodes, head.node_rank, head.dist_port, head.gpus) == (2, 0, 0, tuple(range(8)))
        assert (head.tensor_parallel, head.pipeline_parallel) == (8, 2)
        assert worker_node == "gpu-02" and worker.shard_id == f"{head.shard_id}-r1"
        assert (worker.nnodes, worker.node_rank, worker.head_address, worker.dist_port) == (2, 1, "10.1.0.1", 29500)
        assert worker.gpus == tuple(range(8)) and worker.command_id == f"start:{worker.shard_id}"
        assert worker.weights.source == SPEC["source"]

        h.status(worker_node, worker.shard_id, "ready")
        assert h.replicas.replicas_for("llama-405b") == []  # rank 1 running is not the replica being ready
        h.status("gpu-01", head.shard_id, "ready", port=h.port_for(head))
        [replica] = h.replicas.replicas_for("llama-405b")
        assert replica.id == head.shard_id and replica.base_url == f"http://10.1.0.1:{h.port_for(head)}/v1"

        info = explain(h.rec, "llama-405b")
        [r] = info["replicas"]
        assert r["nodes"] == ["gpu-01", "gpu-02"]
        assert [(s["rank"], s["node"], s["state"]) for s in r["shards"]] == [(0, "gpu-01", "ready"),
                                                                              (1, "gpu-02", "ready")]
        text = explain_text(info)
        assert f"rank 1  {worker.shard_id}  gpu-02  ready  gpus 0,1,2,3,4,5,6,7" in text
        assert f"rank 0  {head.shard_id}  gpu-01  ready  gpus 0,1,2,3,4,5,6,7" in text
        # The cards of both nodes are held: nothing else fits there.
        assert info["next_placement"]["placed_on"] is None
        assert info["next_placement"]["fabric"] == ("no fabric has 2 nodes with 8 free GPUs of class h100-80gb: "
                                                    f"fabric {FABRIC} has 0; fabric roce:10.9.0.0/16 has 1 (gpu-03)")
    finally:
        await store.close()


async def test_one_shard_failing_takes_the_replica_down_whole_and_it_comes_back_whole(tmp_path):
    h, store = await harness(tmp_path, backoff=(10, 60))
    try:
        head, (worker_node, worker) = await up_and_ready(h)
        await h.tick(CRASH_WINDOW + 1)

        h.status(worker_node, worker.shard_id, "exited", exit_code=1, message="NCCL error: unhandled system error")
        assert h.replicas.replicas_for("llama-405b") == []  # out of the router at once
        await h.tick()
        assert [(n, m.shard_id) for n, m in h.agents.stops()] == [("gpu-01", head.shard_id)]
        assert h.agents.starts() == []  # nothing new while rank 0 still holds its cards
        info = explain(h.rec, "llama-405b")
        assert "rank 1 on gpu-02 exited: NCCL error" in info["last_error"]
        h.status("gpu-01", head.shard_id, "stopped")

        head2, (node2, worker2) = await up(h)
        assert head2.shard_id != head.shard_id and worker2.shard_id == f"{head2.shard_id}-r1"
        assert node2 == "gpu-02" and worker2.head_address == "10.1.0.1"

        # Rank 0 failing while starting: a failed start, rank 1 stopped, the whole replica backs off.
        h.status("gpu-01", head2.shard_id, "failed", message="CUDA out of memory")
        await h.tick()
        assert [(n, m.shard_id) for n, m in h.agents.stops()] == [("gpu-02", worker2.shard_id)]
        info = explain(h.rec, "llama-405b")
        assert info["failures"] == 1 and info["status"] == "backing_off"
        h.status("gpu-02", worker2.shard_id, "stopped")
        assert explain(h.rec, "llama-405b")["replicas"] == []
        await h.tick(10)
        [(n, third)] = h.agents.starts()
        assert n == "gpu-01" and third.nnodes == 2 and third.node_rank == 0
    finally:
        await store.close()


async def test_scale_to_zero_stops_every_shard(tmp_path):
    h, store = await harness(tmp_path)
    try:
        head, (worker_node, worker) = await up_and_ready(h)
        await h.catalog.scale("llama-405b", min=0, max=0, actor="test")
        await h.tick()
        assert sorted((n, m.shard_id) for n, m in h.agents.stops()) == [("gpu-01", head.shard_id),
                                                                         ("gpu-02", worker.shard_id)]
        h.status("gpu-01", head.shard_id, "stopped")
        assert len(explain(h.rec, "llama-405b")["replicas"]) == 1  # rank 1 has not stopped yet
        h.status(worker_node, worker.shard_id, "stopped")
        info = explain(h.rec, "llama-405b")
        assert info["replicas"] == [] and info["status"] == "stopped"
    finally:
        await store.close()


async def test_when_no_single_fabric_has_room_the_model_waits_and_says_why(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        h = Harness([], store=store)
        await h.catalog.add(SPEC, actor="test")
        h.connect(gpu_node("gpu-01", "10.1.0.1"))
        h.connect(gpu_node("gpu-03", "10.9.0.3", fabric="roce:10.9.0.0/16"))
        await h.tick()
        assert h.agents.starts() == []
        info = explain(h.rec, "llama-405b")
        assert info["status"] == "unplaced"
        assert info["reason"] == (f"no fabric has 2 nodes with 8 free GPUs of class h100-80gb: fabric {FABRIC} has 1 "
                                  "(gpu-01); fabric roce:10.9.0.0/16 has 1 (gpu-03)")
    finally:
        await store.close()


async def test_a_draining_worker_node_moves_the_whole_replica(tmp_path):
    h, store = await harness(tmp_path)
    try:
        head, (worker_node, worker) = await up_and_ready(h)
        h.rec.drain(worker_node)  # rank 1's node, not rank 0's
        await h.tick()
        assert h.agents.starts() == []  # no two other nodes of the fabric have room: it stays, and says why
        assert explain(h.rec, "llama-405b")["drain_blocked"]["fabric"].startswith("no fabric has 2 nodes")
        h.connect(gpu_node("gpu-04", "10.1.0.4"))
        h.connect(gpu_node("gpu-05", "10.1.0.5"))
        await h.tick()
        [(new_node, new_head)] = h.agents.starts()
        h.status(new_node, new_head.shard_id, "starting", port=h.port_for(new_head), dist_port=29501)
        await h.tick()
        [(new_worker_node, new_worker)] = h.agents.starts()
        assert {new_node, new_worker_node} == {"gpu-04", "gpu-05"}
        h.status(new_worker_node, new_worker.shard_id, "ready")
        h.status(new_node, new_head.shard_id, "ready", port=h.port_for(new_head))
        await h.tick()
        # The replacement is ready: every shard of the original is stopped.
        assert sorted(m.shard_id for _, m in h.agents.stops()) == sorted([head.shard_id, worker.shard_id])
    finally:
        await store.close()


async def test_explain_lists_the_cards_kept_out_in_a_section_of_their_own(tmp_path):
    h, store = await harness(tmp_path)
    try:
        hot = gpu_node("gpu-09", "10.1.0.9")
        cards = list(hot.inventory.gpus)
        cards[3] = attrs.evolve(cards[3], health="degraded", problem="running at 89 °C (warning from 87 °C)")
        h.connect(attrs.evolve(hot, inventory=attrs.evolve(hot.inventory, gpus=tuple(cards))))
        info = explain(h.rec, "llama-405b")
        assert info["kept_out"] == [{"node": "gpu-09", "device": 3, "label": "GPU 3", "class": "h100-80gb",
                                     "reason": "degraded: running at 89 °C (warning from 87 °C)"}]
        text = explain_text(info)
        assert "  cards kept out:\n    gpu-09 GPU 3 (h100-80gb): degraded: running at 89 °C (warning from 87 °C)" in text
    finally:
        await store.close()
