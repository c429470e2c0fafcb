"""The tiny GGUF writer, read back with the gguf package (no llama.cpp needed)."""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install gguf; llmgw's test extra)")

from llmgw.testing.tiny_gguf import CHATML_TEMPLATE, write_tiny_gguf, write_vocab_gguf  # noqa: E402


def test_a_tiny_model_carries_the_vocabulary_and_every_llama_tensor(tmp_path):
    out = write_tiny_gguf(tmp_path / "tiny.gguf", write_vocab_gguf(tmp_path / "vocab.gguf"), layers=2, width=32, heads=4,
                          kv_heads=2, feed_forward=64)
    assert out == tmp_path / "tiny.gguf" and not list(tmp_path.glob(".*.tmp"))
    reader = gguf.GGUFReader(str(out))
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.block_count"].contents() == 2
    assert fields["llama.embedding_length"].contents() == 32
    assert fields["tokenizer.ggml.tokens"].contents()[3] == "▁hello"
    assert fields["tokenizer.ggml.bos_token_id"].contents() == 1
    assert fields["tokenizer.chat_template"].contents() == CHATML_TEMPLATE
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}
    assert shapes["token_embd.weight"] == (32, 6)  # ggml order: width, vocabulary
    assert shapes["blk.1.attn_k.weight"] == (32, 16)  # 2 kv heads of 8
    assert shapes["blk.0.ffn_down.weight"] == (64, 32)
    assert len(shapes) == 2 + 2 * 9


def test_dimensions_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(ValueError, match="multiple"):
        write_tiny_gguf(tmp_path / "x.gguf", write_vocab_gguf(tmp_path / "v.gguf"), width=30, heads=4)


def test_tiny_model_is_written_once_and_says_how_to_get_a_vocabulary(tmp_path, monkeypatch):
    from llmgw.testing.tiny_gguf import tiny_model

    monkeypatch.setenv("LLMGW_LLAMA_CPP_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("LLMGW_LLAMA_VOCAB", raising=False)
    with pytest.raises(FileNotFoundError, match="llamacpp_build --pypi"):
        tiny_model(tmp_path / "a")
    monkeypatch.setenv("LLMGW_LLAMA_VOCAB", str(write_vocab_gguf(tmp_path / "v.gguf")))
    first = tiny_model(tmp_path / "a")
    stamp = first.stat().st_mtime_ns
    assert tiny_model(tmp_path / "a") == first and first.stat().st_mtime_ns == stamp
