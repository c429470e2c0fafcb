"""Messages to frames and back, and the compatibility rules."""

from __future__ import annotations

import attrs
import msgpack
import pytest

from llmgw import wire
from llmgw.wire import (
    CommandResult,
    EngineInstalled,
    EngineStatus,
    EngineWant,
    Provision,
    ControlPlanes,
    CpuInfo,
    DiskFree,
    DrainShard,
    GpuInfo,
    GpuSensor,
    Heartbeat,
    Inventory,
    LogChunk,
    MigInstance,
    Refused,
    Register,
    RemoveWeights,
    RequestLogs,
    Restart,
    RunningShard,
    ShardStatus,
    ShardSummary,
    StartShard,
    StopShard,
    WeightsPresent,
    WeightsProgress,
    WeightsSource,
    Welcome,
)

GPU = GpuInfo(
    index=0, uuid="GPU-1", name="NVIDIA H100 80GB HBM3", gpu_class="h100-80gb",
    memory_total_bytes=85_899_345_920, memory_used_bytes=1 << 30, health="ok",
    temperature_c=41.5, power_w=120.0, utilisation_percent=3.0,
    mig=(MigInstance(uuid="MIG-a", profile="3g.40gb", device=1, gpu_instance=2,
                     compute_instance=0, memory_total_bytes=40 << 30),),
)

SAMPLES = [
    Register(
        node_id="gpu-01", agent_version="0.1.0", hostname="gpu-01.example", addresses=("10.0.1.5",),
        inventory=Inventory(cpu=CpuInfo(cores=64, model="EPYC 9354"), memory_total_bytes=512 << 30,
                            memory_available_bytes=400 << 30,
                            disks=(DiskFree(path="/var/lib/llmgw", free_bytes=1 << 40, total_bytes=2 << 40),),
                            gpus=(GPU,)),
        labels={"llmgw.io/rack": "r1"}, engines={"vllm": "0.9.1", "llamacpp": "b5000"},
        shards=(RunningShard(shard_id="s1", model="qwen", engine="vllm", state="ready", port=20001,
                             pid=4242, gpus=(0,)),),
        weights=(WeightsPresent(model="qwen", source="hf://Qwen/Qwen3", sha256="ab" * 32,
                                size_bytes=10 << 30, path="/var/lib/llmgw/weights/qwen"),),
    ),
    Heartbeat(seq=7, load_1m=1.5, cpu_percent=12.5, memory_available_bytes=300 << 30,
              gpus=(GpuSensor(index=0, temperature_c=60.0, memory_temperature_c=70.0, power_w=300.0,
                              power_limit_w=700.0, utilisation_percent=90.0, memory_used_bytes=70 << 30,
                              foreign_memory_bytes=0, throttle=("sw_power_cap",), ecc_uncorrected=0,
                              nvlink_errors={"crc": 7, "replay": 1, "recovery": 0}),),
              shards=(ShardSummary(shard_id="s1", state="ready", cpu_percent=100.0, memory_bytes=1 << 30,
                                   gpu_memory_bytes=70 << 30),)),
    ShardStatus(shard_id="s1", state="exited", model="qwen", port=20001, pid=4242, exit_code=137,
                message="killed", log_tail=("CUDA out of memory",), command_id="c1"),
    WeightsProgress(model="qwen", source="hf://Qwen/Qwen3", done_bytes=5, total_bytes=10, state="fetching"),
    LogChunk(request_id="r1", lines=("a", "b"), last=False),
    CommandResult(command_id="c1", ok=False, error="no such shard"),
    Welcome(node_id="gpu-01", heartbeat_interval=2.5, epoch=3),
    Refused(reason="revoked"),
    StartShard(shard_id="s1", model="qwen", engine="vllm", engine_version="0.9.1",
               weights=WeightsSource(source="hf://Qwen/Qwen3", sha256="cd" * 32, size_bytes=10 << 30),
               args=("--max-num-seqs", "64"), env={"VLLM_X": "1"}, gpus=(0, 1), cores=16,
               memory_bytes=64 << 30, port=20001, api_key="sk-secret", api_key_ref="keys/s1",
               context_length=32768, command_id="c2"),
    StopShard(shard_id="s1", grace_seconds=10.0, command_id="c3"),
    DrainShard(shard_id="s1", grace_seconds=60.0, command_id="c4"),
    RemoveWeights(model="qwen", source="hf://Qwen/Qwen3", sha256="ef" * 32, command_id="c5"),
    ControlPlanes(addresses=("cp1:7443", "wss://cp2:7443/agent/v1"), epoch=4),
    RequestLogs(request_id="r2", shard_id="s1", lines=50),
    Restart(reason="upgrade", command_id="c6"),
    wire.Upgrade(version="0.2.0", mirror="http://mirror:8081", command_id="c8"),
    Provision(engines=(EngineWant(engine="vllm", version="0.9.1", request_id="q1"), EngineWant(engine="llamacpp")),
              command_id="c7"),
    EngineStatus(engine="vllm", version="0.9.1", state="installed", step="done", request_id="q1",
                 engines={"vllm": "0.9.1"},
                 engine_installs=(EngineInstalled(engine="vllm", version="0.9.1", path="/e/vllm/0.9.1/bin/python"),)),
]


def test_every_message_has_a_sample():
    assert {type(m) for m in SAMPLES} == set(wire.ALL_MESSAGES)
    assert len({cls.type for cls in wire.ALL_MESSAGES}) == len(wire.ALL_MESSAGES)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type)
def test_round_trip(msg):
    frame = wire.encode(msg)
    assert isinstance(frame, bytes)
    data = msgpack.unpackb(frame)
    assert data["type"] == msg.type
    assert wire.decode(frame) == msg


def test_unknown_fields_are_ignored_at_every_level():
    data = wire.to_dict(SAMPLES[0])
    data["from_the_future"] = {"x": 1}
    data["inventory"]["gpus"][0]["new_sensor"] = 3.5
    got = wire.decode(msgpack.packb(data))
    assert got == SAMPLES[0]


def test_missing_fields_take_their_defaults():
    got = wire.decode(msgpack.packb({"type": "heartbeat", "seq": 1}))
    assert got == Heartbeat(seq=1)
    assert got.gpus == () and got.load_1m is None


def test_unknown_type_is_a_clear_error():
    with pytest.raises(wire.UnknownMessageType, match="unknown message type 'defragment_gpus'.*newer"):
        wire.decode(msgpack.packb({"type": "defragment_gpus", "engines": []}))


@pytest.mark.parametrize("frame, match", [
    (b"\xc1", "not a msgpack frame"),
    (msgpack.packb([1, 2]), "must be a map"),
    (msgpack.packb({"seq": 1}), "no 'type'"),
    (msgpack.packb({"type": "heartbeat", "seq": "seven"}), r"malformed 'heartbeat'.*heartbeat\.seq"),
    (msgpack.packb({"type": "register"}), "malformed 'register'"),
])
def test_bad_frames(frame, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode(frame)


def test_expect_limits_the_direction():
    frame = wire.encode(Welcome(node_id="n"))
    assert wire.decode(frame, expect=wire.CONTROL_MESSAGES) == Welcome(node_id="n")
    with pytest.raises(wire.WireError, match="wrong way"):
        wire.decode(frame, expect=wire.AGENT_MESSAGES)


def test_the_api_key_stays_out_of_repr():
    assert "sk-secret" not in repr(SAMPLES[8])


def test_messages_are_frozen():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        SAMPLES[1].seq = 2


def test_converter_factory_makes_independent_converters():
    a, b = wire.make_converter(), wire.make_converter()
    assert a is not b
    assert a.structure({"type": "restart"}, Restart) == Restart()


def test_protocol_compatibility_rule():
    assert wire.check_peer_protocol(wire.PROTOCOL_VERSION) is None
    assert wire.check_peer_protocol(wire.PROTOCOL_VERSION + 5) is None  # newer peers speak down
    assert "older" in wire.check_peer_protocol(wire.OLDEST_PROTOCOL - 1)
