"""`mirror import` and `mirror import-ollama`: checked, all or nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmgw.mirror.importer import ImportRefused, import_file, import_ollama
from llmgw.mirror.layout import SIDECAR, read_sidecar_file

WEIGHTS = b"GGUF" + b"\3" * 4000  # what conftest.fake_ollama puts in its model blob
PROJECTOR = b"GGUF" + b"\4" * 1000


def visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


async def test_import_a_local_file(layout, tmp_path, today):
    source = tmp_path / "my-model.Q4.gguf"
    source.write_bytes(WEIGHTS)
    result = await import_file(layout, source, "mine")
    assert (result.model, result.version) == ("mine", today)
    directory = layout.version_dir("mine", today)
    assert (directory / "my-model.Q4.gguf").read_bytes() == WEIGHTS
    sidecar = read_sidecar_file(directory / SIDECAR)
    assert sidecar.complete and sidecar.origin.kind == "file" and sidecar.origin.path == str(source)
    assert sidecar.files[0].sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    again = await import_file(layout, source, "mine")
    assert again.unchanged_since == today and layout.versions("mine") == [today]
    source.write_bytes(WEIGHTS + b"more")
    changed = await import_file(layout, source, "mine")
    assert changed.version == f"{today}-2"
    assert [p for p in visible(layout.model_dir("mine")) if p.startswith(".staging")] == []


async def test_import_ollama_with_its_projector(layout, tmp_path, today, h):
    ollama = tmp_path / "ollama"
    digests = h.fake_ollama(ollama)
    result = await import_ollama(layout, "llava:7b", ollama, base_url="http://models.internal:8081")
    assert (result.model, result.version) == ("llava-7b", today)
    directory = layout.version_dir("llava-7b", today)
    assert (directory / "llava-7b.gguf").read_bytes() == WEIGHTS
    assert (directory / "mmproj-llava-7b.gguf").read_bytes() == PROJECTOR
    sidecar = read_sidecar_file(directory / SIDECAR)
    assert sidecar.origin.kind == "ollama" and sidecar.origin.path == "llava:7b"
    assert {f.path: f.revision for f in sidecar.files} == {
        "llava-7b.gguf": f"sha256:{digests['model']}", "mmproj-llava-7b.gguf": f"sha256:{digests['projector']}"}
    assert f"source: http://models.internal:8081/llava-7b/{today}/llava-7b.gguf" in result.definition
    assert "mmproj-llava-7b.gguf" in result.definition and '"--ctx-size", "8192"' in result.definition
    from ruamel.yaml import YAML

    [entry] = YAML(typ="safe").load(result.definition)
    assert entry["name"] == "llava-7b" and entry["engine"] == "llamacpp"


async def test_a_damaged_blob_imports_nothing(layout, tmp_path, h):
    ollama = tmp_path / "ollama"
    digests = h.fake_ollama(ollama)
    blob = ollama / "blobs" / f"sha256-{digests['projector']}"
    blob.write_bytes(PROJECTOR[:-1] + b"\0")
    with pytest.raises(ImportRefused, match="damaged"):
        await import_ollama(layout, "llava:7b", ollama)
    assert layout.versions("llava-7b") == [] and layout.models() == []
    assert not layout.model_dir("llava-7b").exists()  # no staging left behind either


@pytest.mark.parametrize("extra, message", [
    ([{"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:" + "1" * 64, "size": 1}], "LoRA"),
    ([{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "2" * 64, "size": 1}],
     "2 weight layers"),
])
async def test_what_is_refused(layout, tmp_path, extra, message, h):
    ollama = tmp_path / "ollama"
    h.fake_ollama(ollama, extra_layers=extra)
    with pytest.raises(ImportRefused, match=message):
        await import_ollama(layout, "llava:7b", ollama)
    assert layout.models() == []


async def test_missing_model_and_bad_names(layout, tmp_path, h):
    ollama = tmp_path / "ollama"
    h.fake_ollama(ollama, "llama3.2", "latest", projector=False)
    with pytest.raises(ImportRefused, match="no manifest"):
        await import_ollama(layout, "mistral", ollama)
    with pytest.raises(ImportRefused, match="not an Ollama model"):
        await import_ollama(layout, "../../etc:passwd", ollama)
    result = await import_ollama(layout, "llama3.2", ollama)
    assert result.model == "llama3.2" and [f.path for f in result.files] == ["llama3.2.gguf"]
    assert "source: llama3.2/" in result.definition  # no base URL: the path on the mirror
