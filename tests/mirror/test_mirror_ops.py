"""list, unused, remove, verify, and what the catalog says uses what."""

from __future__ import annotations

import json

import pytest

from llmgw.mirror import ops
from llmgw.mirror.layout import LayoutError, Origin, file_lock, hidden_sibling


@pytest.fixture
def held(layout, h):
    h.make_version(layout, "qwen", "2025-05-01", {"qwen.gguf": b"GGUF-old"})
    h.make_version(layout, "qwen", "2025-06-01", {"qwen.gguf": b"GGUF-new", "mmproj-qwen-f16.gguf": b"GGUF-p"})
    h.make_version(layout, "judge", "2025-06-02", {"judge.gguf": b"GGUF-judge"},
                   origin=Origin(kind="registry", repo="Acme/Judge-GGUF", revision="abc"))
    h.make_version(layout, "spare", "2025-04-01", {"spare.gguf": b"GGUF-spare"})
    return layout


def catalog_file(tmp_path, text: str, name: str = "catalog.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return ops.Catalog.load(path)


def test_catalog_shapes(tmp_path):
    as_map = catalog_file(tmp_path, "chat: qwen/2025-06-01/qwen.gguf\nboth: [a, b]\n")
    assert as_map.sources == {"chat": ("qwen/2025-06-01/qwen.gguf",), "both": ("a", "b")}
    server_yaml = catalog_file(tmp_path, "listen: ':8080'\nmodels:\n  - name: chat\n    source: qwen\n"
                                         "  - name: remote\n    endpoints: []\n")
    assert server_yaml.sources == {"chat": ("qwen",), "remote": ()}
    as_json = catalog_file(tmp_path, json.dumps({"models": {"chat": "qwen"}}), "c.json")
    assert as_json.sources == {"chat": ("qwen",)}
    with pytest.raises(ops.CatalogError, match="models\\[0\\] has no name"):
        catalog_file(tmp_path, "models:\n  - source: x\n")
    with pytest.raises(ops.CatalogError, match="not YAML"):
        catalog_file(tmp_path, "a: [b\n")
    with pytest.raises(ops.CatalogError, match="No such file"):
        ops.Catalog.load(tmp_path / "missing.yaml")


def test_usage_by_url_path_model_and_repository(held, tmp_path):
    catalog = catalog_file(tmp_path, "\n".join([
        "chat: http://models.internal:8081/qwen/2025-05-01/qwen.gguf",
        f"vision: {held.root}/qwen/2025-06-01",
        "newest: qwen",
        "guard: acme/judge-gguf@main",
        "elsewhere: /opt/models/x.gguf",
        "hub: Qwen/Qwen3-8B",
    ]))
    usage = catalog.usage(held)
    assert usage == {("qwen", "2025-05-01"): ["chat"], ("qwen", "2025-06-01"): ["newest", "vision"],
                     ("judge", "2025-06-02"): ["guard"]}


def test_list_shows_sizes_state_and_users(held, tmp_path):
    rows = ops.list_versions(held, catalog_file(tmp_path, "chat: qwen/2025-06-01\n"))
    by_key = {(r.model, r.version): r for r in rows}
    new = by_key[("qwen", "2025-06-01")]
    assert (new.state, new.files, new.size, new.used_by, new.percent) == ("complete", 2, 14, ("chat",), 100)
    assert by_key[("spare", "2025-04-01")].used_by == ()
    assert by_key[("judge", "2025-06-02")].origin == "Acme/Judge-GGUF@abc"


async def test_list_shows_how_far_a_download_is(layout, h):
    sidecar = h.make_version(layout, "big", "2025-06-01", {"a.gguf": b"x" * 100}, complete=False)
    directory = layout.version_dir("big", "2025-06-01")
    sidecar.files[0].size = 400
    layout.write_sidecar(sidecar)
    (directory / "a.gguf").rename(hidden_sibling(directory / "a.gguf", ".partial"))
    [row] = ops.list_versions(layout)
    assert (row.state, row.present, row.size, row.percent) == ("incomplete", 100, 400, 25)
    async with file_lock(hidden_sibling(directory / "a.gguf", ".lock")):
        [row] = ops.list_versions(layout)
        assert row.state == "downloading"
        with pytest.raises(LayoutError, match="being downloaded"):
            ops.remove(layout, "big/2025-06-01")


def test_unused(held, tmp_path):
    catalog = catalog_file(tmp_path, "chat: qwen\nguard: judge/2025-06-02\n")
    assert [(r.model, r.version) for r in ops.unused_versions(held, catalog)] == [
        ("qwen", "2025-05-01"), ("spare", "2025-04-01")]


def test_remove_refuses_a_used_version_without_force(held, tmp_path):
    catalog = catalog_file(tmp_path, "chat: qwen/2025-05-01\n")
    with pytest.raises(ops.InUse, match="used by chat"):
        ops.remove(held, "qwen/2025-05-01", catalog)
    with pytest.raises(ops.InUse):
        ops.remove(held, "qwen", catalog)  # the whole model holds it too
    assert held.versions("qwen") == ["2025-05-01", "2025-06-01"]
    assert ops.remove(held, "qwen/2025-05-01", catalog, force=True) == [("qwen", "2025-05-01")]
    assert held.versions("qwen") == ["2025-06-01"]
    assert ops.remove(held, "spare", catalog) == [("spare", "2025-04-01")]
    assert not (held.root / "spare").exists()
    ops.remove(held, "judge/2025-06-02", catalog)
    assert not (held.root / "judge").exists()  # its last version: the model's directory goes too
    with pytest.raises(LayoutError, match="no such"):
        ops.remove(held, "qwen/2024-01-01", catalog)
    with pytest.raises(LayoutError):
        ops.remove(held, "../etc", catalog)


async def test_verify_finds_a_corrupted_file(held):
    results = await ops.verify(held)
    assert all(not r.problems for r in results) and sum(r.checked for r in results) == 5
    path = held.version_dir("qwen", "2025-06-01") / "qwen.gguf"
    path.write_bytes(b"GGUF-nex")  # same size, one byte different
    (held.version_dir("qwen", "2025-06-01") / "stray.bin").write_bytes(b"?")
    [result] = await ops.verify(held, "qwen/2025-06-01")
    assert len(result.problems) == 1 and "qwen.gguf: sha256" in result.problems[0]
    assert any("stray.bin" in n for n in result.notes)
    path.unlink()
    [result] = await ops.verify(held, "qwen/2025-06-01")
    assert result.problems == ("qwen.gguf: missing",)


async def test_verify_without_a_sidecar_is_a_problem(layout):
    (layout.root / "hand" / "2025-01-01").mkdir(parents=True)
    (layout.root / "hand" / "2025-01-01" / "x.gguf").write_bytes(b"x")
    [result] = await ops.verify(layout)
    assert result.problems and "nothing to check" in result.problems[0]
    [row] = ops.list_versions(layout)
    assert row.state == "no sidecar" and row.size == 1


def test_version_names(layout, h, today):
    assert layout.new_version_name("fresh") == today
    h.make_version(layout, "m", today, {"a": b"a"})
    h.make_version(layout, "m", f"{today}-2", {"a": b"b"})
    assert layout.new_version_name("m") == f"{today}-3"
    h.make_version(layout, "m", f"{today}-10", {"a": b"c"})
    assert layout.versions("m")[-1] == f"{today}-10"  # ordered as numbers, not text
