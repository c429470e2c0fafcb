"""Planning: a model's shape from a GGUF header or a config.json, its memory, and where it fits here."""

from __future__ import annotations

import json

import pytest
from ctl_live import ctl_against

pytest.importorskip("gguf", reason="the gguf package (pip install gguf; llmgw's test extra)")

from llmgw.admin.cluster_types import NodeInfo
from llmgw.admin.convert import unstructure
from llmgw.admin.testing import FakeCluster, gpu_node
from llmgw.cli.main import main
from llmgw.mirror import plan
from llmgw.testing.tiny_gguf import write_tiny_gguf, write_vocab_gguf

GiB = 1 << 30

#: Llama 3.1 8B's config.json, the numbers that matter.
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 14336,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_gguf(tmp_path / "tiny.gguf", write_vocab_gguf(tmp_path / "vocab.gguf"), layers=2, width=64,
                           heads=4, kv_heads=2, context=2048)


def cpu_node(node_id: str = "cpu-01", memory: int = 64 * GiB) -> NodeInfo:
    return NodeInfo(id=node_id, state="ready", hostname=node_id, cores=32, memory_total_bytes=memory,
                    memory_available_bytes=memory - 4 * GiB)


def machines(*nodes: NodeInfo, replicas=()) -> list[plan.Machine]:
    return plan.machines_from_api([unstructure(n) for n in nodes], list(replicas))


def test_the_tiny_gguf_header_gives_its_shape(tiny):
    [shape] = plan.shapes_from_path(tiny)
    assert (shape.architecture, shape.layers, shape.heads, shape.kv_heads, shape.hidden) == ("llama", 2, 4, 2, 64)
    assert (shape.head_dim, shape.context, shape.quantisation, shape.format) == (16, 2048, "F16", "gguf")
    # the tensors' own bytes, not the file's (which holds the vocabulary and header too)
    assert 0 < shape.weight_bytes < tiny.stat().st_size
    # K and V, 2 layers, 2 KV heads of 16, f16
    assert shape.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2


def test_the_tiny_gguf_fits_one_card_and_says_why(tiny):
    shapes = plan.shapes_from_path(tiny)
    here = machines(gpu_node("gpu-a", gpus=8), cpu_node(),
                    replicas=[{"node": "gpu-a", "gpus": [0, 1, 2]}])
    result = plan.plan(str(tiny), shapes, here)
    [c] = result.candidates
    assert c.best and c.fits
    assert [w.kind for w in c.ways] == ["one card", "cpu"]
    one = c.ways[0]
    assert one.gpu_class == "h100-80g" and one.where == ("gpu-a",) and one.free_now == ("gpu-a",)
    assert "one h100-80g card holds it all" in c.why and "5 of 8 such cards are free now" in c.why
    assert c.need.context == 2048  # the model's own context, under the 8192 default cap
    assert c.ways[1].where == ("cpu-01",)
    text = plan.render_text(result)
    assert text.splitlines()[1].startswith("★ tiny.gguf  F16")


def test_a_busy_card_is_not_an_unfit_one(tiny):
    shapes = plan.shapes_from_path(tiny)
    here = machines(gpu_node("gpu-a", gpus=1), replicas=[{"node": "gpu-a", "gpus": [0]}])
    [c] = plan.plan("tiny", shapes, here).candidates
    assert c.best and c.ways[0].kind == "one card" and c.ways[0].free_now == ()
    assert "0 of 1 such cards are free now" in c.why
    assert "busy now" in plan.render_text(plan.plan("tiny", shapes, here))


def test_a_directory_of_quantisations_lists_each_the_best_first(tmp_path):
    vocab = write_vocab_gguf(tmp_path / "vocab.gguf")
    repo = tmp_path / "repo"
    repo.mkdir()
    write_tiny_gguf(repo / "tiny-Q8_0.gguf", vocab)
    write_tiny_gguf(repo / "tiny-F16.gguf", vocab)
    (repo / "mmproj-tiny-f16.gguf").write_bytes(b"GGUF" + b"\0" * 1000)
    shapes = plan.shapes_from_path(repo)
    assert sorted(s.file for s in shapes) == ["tiny-F16.gguf", "tiny-Q8_0.gguf"]
    assert all(s.projector == "mmproj-tiny-f16.gguf" and s.projector_bytes == 1004 for s in shapes)
    result = plan.plan("repo", shapes, machines(gpu_node("gpu-a", gpus=2)))
    assert [c.best for c in result.candidates] == [True, False]
    assert result.candidates[0].shape.file == "tiny-F16.gguf"  # both fit a card alike: the better one first


def test_llama_8b_config_is_about_15_gib_of_weights_and_128_kib_of_kv_a_token():
    shape = plan.shape_from_config(LLAMA_8B, name="meta-llama/Llama-3.1-8B")
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim) == (32, 32, 8, 128)
    assert shape.quantisation == "BF16" and shape.context == 131072
    assert 14.5 * GiB < shape.weight_bytes < 15.5 * GiB
    assert shape.kv_bytes_per_token == 128 * 1024
    need = plan.need_of(shape)
    assert need.context == 8192 and need.kv_cache == GiB
    assert plan.need_of(shape, 131072, 4).kv_cache == 64 * GiB


def test_config_json_quantised_and_sized_by_its_safetensors(tmp_path):
    awq = plan.shape_from_config({**LLAMA_8B, "quantization_config": {"quant_method": "awq", "bits": 4}})
    assert awq.quantisation == "AWQ 4-bit" and 3.5 * GiB < awq.weight_bytes < 5 * GiB
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 3000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 1000)
    [shape] = plan.shapes_from_path(tmp_path)
    assert shape.format == "safetensors" and shape.weight_bytes == 4000


def test_large_models_spread_over_cards_then_nodes_and_a_gguf_never_spans_nodes():
    here = machines(gpu_node("gpu-a", gpus=8), gpu_node("gpu-b", gpus=8), cpu_node(memory=512 * GiB))
    big = {**LLAMA_8B, "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
           "intermediate_size": 28672}
    [c] = plan.plan("70b", [plan.shape_from_config(big)], here).candidates
    assert c.ways[0].kind == "cards of a node" and c.ways[0].cards == 2 and "tensor-parallel 2" in c.why
    huge = {**big, "num_hidden_layers": 126, "hidden_size": 16384, "num_attention_heads": 128,
            "intermediate_size": 53248}
    [c] = plan.plan("405b", [plan.shape_from_config(huge)], here).candidates
    assert (c.ways[0].kind, c.ways[0].nodes, c.ways[0].cards) == ("several nodes", 2, 8)
    gguf_huge = plan.ModelShape(file="huge-Q8_0.gguf", format="gguf", architecture="llama", layers=126, heads=128,
                                kv_heads=8, hidden=16384, head_dim=128, context=8192, quantisation="Q8_0",
                                weight_bytes=700 * GiB)
    [c] = plan.plan("405b-gguf", [gguf_huge], here).candidates
    assert not c.fits and not c.best and "llama.cpp runs a GGUF on one node" in c.why


def test_ctl_model_plan_on_the_tiny_gguf_says_where_it_fits_and_why(tmp_path, tiny, capsys, monkeypatch):
    cluster = FakeCluster(nodes=[gpu_node("gpu-h100", gpus=8), cpu_node("cpu-01")])
    with ctl_against(tmp_path, monkeypatch, cluster=cluster) as live:
        assert main(["ctl", "model", "plan", str(tiny)]) == 0
        out = capsys.readouterr().out
        assert "★ tiny.gguf  F16" in out
        assert "one h100-80g card holds it all" in out and "8 of 8 such cards are free now" in out
        assert "free now on gpu-h100" in out and "free now on cpu-01" in out
        assert main(["ctl", "model", "plan", str(tiny), "--context", "1024", "--concurrency", "4", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
    [f] = answer["files"]
    assert f["best"] and f["fits"] and f["ways"][0]["kind"] == "one card"
    assert f["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 2 * 1024 * 4
    assert answer["context"] == 1024 and answer["concurrency"] == 4


def test_ctl_model_plan_refuses_a_source_it_cannot_read(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LLMGW_MIRROR_URL", raising=False)
    monkeypatch.setenv("LLMGW_ADMIN_TOKEN", "x")
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["ctl", "model", "plan", str(tmp_path / "notes.txt")]) == 2
    assert "give a .gguf file" in capsys.readouterr().err
    assert main(["ctl", "model", "plan", "some-model"]) == 2
    assert "--mirror URL" in capsys.readouterr().err


async def test_a_gguf_on_the_mirror_is_read_from_its_header_only(tmp_path, tiny, layout, h, monkeypatch):
    monkeypatch.setattr(plan, "HEADER_FIRST", 256)  # less than the header: it is read again, further
    from llmgw.mirror.client import MirrorClient
    from llmgw.mirror.serve import build_file_app

    data = tiny.read_bytes()
    h.make_version(layout, "tiny", "2025-06-01", {"tiny-F16.gguf": data, "mmproj-tiny-f16.gguf": b"GGUF" + b"1" * 96})
    seen = []
    app = build_file_app(layout)

    async def record(app, handler):
        async def middleware(request):
            seen.append(request.headers.get("Range"))
            return await handler(request)
        return middleware

    app.middlewares.append(record)
    runner, base = await h.start_app(app)
    try:
        async with MirrorClient(base) as client:
            name, shapes = await plan.shapes_from_mirror(client, "tiny")
    finally:
        await runner.cleanup()
    assert name == "tiny/2025-06-01"
    [shape] = shapes
    local = plan.shapes_from_path(tiny)[0]
    assert (shape.layers, shape.heads, shape.kv_heads, shape.weight_bytes) == (
        local.layers, local.heads, local.kv_heads, local.weight_bytes)
    assert shape.projector == "mmproj-tiny-f16.gguf" and shape.projector_bytes == 100
    ranges = [r for r in seen if r]
    assert ranges[0] == "bytes=0-255" and len(ranges) == 2, ranges  # then once more, the whole header
