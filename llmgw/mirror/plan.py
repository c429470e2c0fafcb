"""Planning: what a model needs in memory, and where in this cluster that fits.

A model's **shape** is read from a GGUF header (the `gguf` package's
GGUFReader: architecture, layers, attention heads and KV heads, width,
trained context, file type, and the bytes of every tensor) or from a
`config.json` (num_hidden_layers, num_attention_heads, num_key_value_heads,
hidden_size, max_position_embeddings, torch_dtype, quantization_config) with
the safetensors beside it. A GGUF on a mirror is read from its first bytes
only: they are written at the start of a sparse file of the file's size, so
GGUFReader sees the whole header without the weights being fetched.

What it **needs** for a context of C tokens held by N sequences at once:

    weights   the tensors' bytes (a projector's added)
    KV cache  2 (K and V) x layers x KV heads x head size x 2 bytes (f16) x C x N
    overhead  1 GiB per card (CUDA context, activations), 512 MiB on CPUs

and a card gives `USABLE` (90%) of its memory, as vLLM's default
gpu_memory_utilization does. Where it **fits** is judged per file, best
first: one card, several cards of one node (llama.cpp splits a GGUF across a
node's cards by layer; vLLM needs a tensor-parallel size dividing the heads),
several nodes' cards (original weights only: llama.cpp does not span nodes),
the CPUs of a node. Which file is best follows the hardware the cluster has,
not what it runs now: a file for a card in use is still the best for it,
and each way says whether that hardware is free now.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

GiB = 1 << 30
MiB = 1 << 20
#: The share of a card's memory an engine takes (vLLM's gpu_memory_utilization default).
USABLE = 0.90
#: The share of a node's host memory a model on its CPUs may take.
HOST_USABLE = 0.90
GPU_OVERHEAD = 1 * GiB
CPU_OVERHEAD = 512 * MiB
KV_BYTES = 2  # an f16 cache
DEFAULT_CONTEXT = 8192
#: How much of a remote GGUF is read first, and the most read before giving up on its header.
HEADER_FIRST = 4 * MiB
HEADER_MOST = 128 * MiB

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP8|MXFP4)(?![A-Za-z0-9])", re.IGNORECASE)
#: Bits per weight of the usual GGUF quantisations, to prefer the better of two files that fit alike.
_BITS = {
    "F32": 16.0, "BF16": 16.0, "F16": 16.0, "FP16": 16.0, "Q8_0": 8.5, "FP8": 8.0, "Q6_K": 6.6, "Q5_K_M": 5.7,
    "Q5_K_S": 5.5, "Q5_1": 6.0, "Q5_0": 5.5, "Q4_K_M": 4.8, "Q4_K_S": 4.6, "Q4_1": 5.0, "Q4_0": 4.5,
    "IQ4_NL": 4.5, "IQ4_XS": 4.3, "MXFP4": 4.25, "Q3_K_L": 4.3, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "IQ3_M": 3.7,
    "IQ3_S": 3.4, "IQ3_XS": 3.3, "IQ3_XXS": 3.1, "Q2_K": 2.6, "Q2_K_S": 2.5, "IQ2_M": 2.7, "IQ2_S": 2.5,
    "IQ2_XS": 2.3, "IQ2_XXS": 2.1, "IQ1_M": 1.8, "IQ1_S": 1.6,
}
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


class PlanError(Exception):
    """A source whose shape cannot be read; the message says what was wrong and where."""


# ---------------------------------------------------------------- shape


@attrs.frozen
class ModelShape:
    """What memory planning needs to know of one model file (or one directory of safetensors)."""

    file: str  #: the file (a GGUF) or directory (config.json + safetensors) it was read from
    format: str  #: gguf | safetensors
    architecture: str
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    head_dim: int  #: the size of one key (and one value) head
    context: int  #: the context length it was trained for; 0 when not said
    quantisation: str  #: Q4_K_M, F16, BF16, AWQ 4-bit, ...
    weight_bytes: int
    projector: str = ""  #: a vision projector loaded with it
    projector_bytes: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_BYTES

    @property
    def quality(self) -> float:
        """Bits per weight (16 at most), to prefer the better of two files that fit alike."""
        bits = _BITS.get(self.quantisation.upper())
        if bits is None:
            match = re.search(r"(\d+)-bit", self.quantisation)
            bits = float(match.group(1)) if match else 8.0
        return min(bits, 16.0)

    def to_json(self) -> dict[str, Any]:
        value = attrs.asdict(self)
        value["kv_bytes_per_token"] = self.kv_bytes_per_token
        return value


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        value = field.contents()
    except Exception:  # noqa: BLE001 - an odd field is as good as a missing one
        return None
    if isinstance(value, list):  # per-layer values (some models vary KV heads by layer): the largest
        numbers = [v for v in value if isinstance(v, (int, float))]
        return max(numbers) if numbers else None
    return value


def quantisation_of(name: str, file_type: int | None = None) -> str:
    """Q4_K_M and the like, from GGUF's general.file_type or else the file's name."""
    if file_type is not None:
        try:
            from gguf import LlamaFileType

            label = LlamaFileType(int(file_type)).name
            return label.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (ImportError, ValueError):
            pass
    match = _QUANT_IN_NAME.search(Path(name).name)
    return match.group(1).upper() if match else "unknown"


def shape_from_gguf(path: str | os.PathLike[str], *, name: str | None = None, size: int | None = None) -> ModelShape:
    """A GGUF's shape from its header; `name` and `size` stand for the real file's when `path` is a stand-in."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - a dependency of llmgw
        raise PlanError("reading a GGUF needs the gguf package: pip install gguf") from exc
    label = name or str(path)
    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError, IndexError, KeyError, OverflowError) as exc:
        raise PlanError(f"{label}: not a GGUF file llmgw can read ({exc})") from None
    return _shape_of_reader(reader, label, size)


def _shape_of_reader(reader: Any, label: str, size: int | None) -> ModelShape:
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise PlanError(f"{label}: the GGUF header names no general.architecture")
    if arch == "clip":
        raise PlanError(f"{label}: a vision projector, not a model; plan the model it goes with")
    layers = _field(reader, f"{arch}.block_count")
    heads = _field(reader, f"{arch}.attention.head_count")
    if not layers or not heads:
        raise PlanError(f"{label}: the GGUF header has no {arch}.block_count or {arch}.attention.head_count")
    kv_heads = _field(reader, f"{arch}.attention.head_count_kv") or heads
    hidden = _field(reader, f"{arch}.embedding_length") or 0
    key_length = _field(reader, f"{arch}.attention.key_length")
    value_length = _field(reader, f"{arch}.attention.value_length")
    head_dim = int(hidden) // int(heads) if hidden else 0
    if key_length and value_length:
        head_dim = (int(key_length) + int(value_length)) // 2
    context = _field(reader, f"{arch}.context_length") or 0
    tensor_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    return ModelShape(
        file=label, format="gguf", architecture=arch, layers=int(layers), heads=int(heads), kv_heads=int(kv_heads),
        hidden=int(hidden), head_dim=head_dim, context=int(context),
        quantisation=quantisation_of(label, _field(reader, "general.file_type")),
        weight_bytes=tensor_bytes or int(size or 0),
    )


def shape_from_config(config: Mapping[str, Any], *, name: str = "config.json",
                      weight_bytes: int | None = None) -> ModelShape:
    """A shape from a Hugging Face config.json; the weights' bytes are estimated when not given."""
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else None
    c: Mapping[str, Any] = {**config, **text} if text else config
    layers = c.get("num_hidden_layers") or c.get("n_layer") or c.get("num_layers")
    heads = c.get("num_attention_heads") or c.get("n_head")
    hidden = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    if not (isinstance(layers, int) and isinstance(heads, int) and isinstance(hidden, int)):
        raise PlanError(f"{name}: needs num_hidden_layers, num_attention_heads and hidden_size as numbers")
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or hidden // heads
    context = c.get("max_position_embeddings") or c.get("n_positions") or 0
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16").removeprefix("torch.")
    quant = c.get("quantization_config") if isinstance(c.get("quantization_config"), Mapping) else None
    if quant:
        method = str(quant.get("quant_method") or "quantized")
        bits = quant.get("bits") or quant.get("w_bit") or quant.get("weight_bits")
        if not bits and method in ("fp8", "fbgemm_fp8"):
            bits = 8
        label = f"{method.upper()} {bits}-bit" if bits else method.upper()
    else:
        label = dtype.upper().replace("FLOAT", "F")  # bfloat16 -> BF16, float16 -> F16
    if weight_bytes is None:
        weight_bytes = _estimate_weight_bytes(c, layers, heads, kv_heads, hidden, head_dim, dtype, quant)
    return ModelShape(
        file=name, format="safetensors", architecture=str((c.get("architectures") or [c.get("model_type", "")])[0]),
        layers=layers, heads=heads, kv_heads=int(kv_heads), hidden=hidden, head_dim=int(head_dim),
        context=int(context), quantisation=label, weight_bytes=int(weight_bytes),
    )


def _estimate_weight_bytes(c: Mapping[str, Any], layers: int, heads: int, kv_heads: int, hidden: int,
                           head_dim: int, dtype: str, quant: Mapping[str, Any] | None) -> int:
    intermediate = c.get("intermediate_size") or 4 * hidden
    vocab = c.get("vocab_size") or 32000
    experts = c.get("num_local_experts") or c.get("num_experts") or 1
    moe_intermediate = c.get("moe_intermediate_size") or intermediate
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * (moe_intermediate if experts > 1 else intermediate) * experts
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    params = layers * (attention + mlp) + embeddings
    if quant:
        bits = quant.get("bits") or quant.get("w_bit") or (8 if "fp8" in str(quant.get("quant_method")) else 4)
        return int(params * (float(bits) + 0.25) / 8)  # scales and zeros: about a quarter bit a weight
    return params * _DTYPE_BYTES.get(dtype, 2)


# ---------------------------------------------------------------- reading sources


def _gguf_groups(names: Iterable[str]) -> list[tuple[str, list[str], str]]:
    """(first part, every part, projector) for each model in a list of GGUF names; projectors ride along."""
    names = sorted(n for n in names if n.lower().endswith(".gguf"))
    projectors = [n for n in names if "mmproj" in Path(n).name.lower()]
    groups: dict[str, list[str]] = {}
    for n in names:
        if n in projectors:
            continue
        match = _SPLIT.search(n)
        key = n[: match.start()] if match else n
        groups.setdefault(key, []).append(n)
    out = []
    for parts in groups.values():
        folder = str(Path(parts[0]).parent)
        projector = next((p for p in sorted(projectors, key=lambda p: ("f16" not in p.lower(), p))
                          if str(Path(p).parent) == folder), "")
        out.append((parts[0], parts, projector))
    return out


def shapes_from_path(path: str | os.PathLike[str]) -> list[ModelShape]:
    """A .gguf file, or a directory of GGUFs or of config.json with safetensors."""
    p = Path(path)
    if p.is_file():
        if p.name == "config.json":
            return shapes_from_path(p.parent)
        if not p.name.lower().endswith(".gguf"):
            raise PlanError(f"{p}: give a .gguf file, or a directory with config.json and safetensors")
        return [shape_from_gguf(p, name=p.name)]
    if not p.is_dir():
        raise PlanError(f"{p}: no such file or directory")
    files = {str(f.relative_to(p).as_posix()): f for f in p.rglob("*") if f.is_file()
             and not any(part.startswith(".") for part in f.relative_to(p).parts)}
    shapes = []
    for first, parts, projector in _gguf_groups(files):
        shape = shape_from_gguf(files[first], name=first)
        total = sum(files[n].stat().st_size for n in parts) if len(parts) > 1 else shape.weight_bytes
        shapes.append(_with_projector(attrs.evolve(shape, weight_bytes=total), projector,
                                      files[projector].stat().st_size if projector else 0))
    if "config.json" in files:
        shapes.append(_shape_from_config_file(files["config.json"], p.name,
                                              _safetensors_bytes({n: f.stat().st_size for n, f in files.items()})))
    if not shapes:
        raise PlanError(f"{p}: no .gguf files and no config.json in it")
    return shapes


def _with_projector(shape: ModelShape, projector: str, size: int) -> ModelShape:
    return attrs.evolve(shape, projector=projector, projector_bytes=size) if projector else shape


def _safetensors_bytes(sizes: Mapping[str, int | None]) -> int | None:
    weights = [s for n, s in sizes.items() if n.endswith(".safetensors") and "/" not in n]
    if not weights or any(s is None for s in weights):
        return None
    return sum(int(s) for s in weights if s is not None)


def _shape_from_config_file(path: Path, name: str, weight_bytes: int | None) -> ModelShape:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"{path}: not a JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise PlanError(f"{path}: not a JSON object")
    return shape_from_config(config, name=name, weight_bytes=weight_bytes)


async def shapes_from_mirror(client: Any, source: str) -> tuple[str, list[ModelShape]]:
    """Every model file of a mirror version (`model[/version]`): (the version named, its shapes).

    `client` is a `llmgw.mirror.client.MirrorClient`. Each GGUF's header is
    read through byte ranges; a config.json is read whole.
    """
    from llmgw.mirror.client import MirrorError, MirrorRef

    ref = MirrorRef.parse(source)
    index = await client.index(ref.model, ref.version)
    sizes = {f.path: f.size for f in index.files}
    shapes = []
    for first, parts, projector in _gguf_groups(sizes):
        if ref.path and ref.path not in parts:
            continue
        url = client.file_url(index.model, index.version, first)
        shape = await _remote_gguf_shape(client.session, url, first, sizes.get(first))
        total = sum(sizes.get(n) or 0 for n in parts) if len(parts) > 1 else shape.weight_bytes
        shapes.append(_with_projector(attrs.evolve(shape, weight_bytes=total), projector,
                                      (sizes.get(projector) or 0) if projector else 0))
    if not ref.path and "config.json" in sizes:
        url = client.file_url(index.model, index.version, "config.json")
        async with client.session.get(url) as response:
            if response.status != 200:
                raise MirrorError(f"{url}: {response.status} {response.reason}")
            config = json.loads(await response.read())
        shapes.append(shape_from_config(config, name=f"{index.model}/{index.version}",
                                        weight_bytes=_safetensors_bytes(sizes)))
    if not shapes:
        raise PlanError(f"{index.model}/{index.version}: no .gguf files and no config.json in it")
    return f"{index.model}/{index.version}", shapes


async def _remote_gguf_shape(session: Any, url: str, name: str, size: int | None) -> ModelShape:
    """Read a GGUF's header through byte ranges into a sparse stand-in of the file's size."""
    want = HEADER_FIRST
    with tempfile.TemporaryDirectory(prefix="llmgw-plan-") as folder:
        stand_in = Path(folder) / "header.gguf"
        while True:
            async with session.get(url, headers={"Range": f"bytes=0-{want - 1}"}) as response:
                if response.status not in (200, 206):
                    raise PlanError(f"{url}: {response.status} {response.reason}")
                buffer = bytearray()
                while len(buffer) < want:  # a server that ignores Range is read no further than wanted
                    chunk = await response.content.read(want - len(buffer))
                    if not chunk:
                        break
                    buffer += chunk
                head = bytes(buffer)
            total = size or len(head)
            shape, needed = await asyncio.to_thread(_read_stand_in, stand_in, head, total, name, size)
            if shape is not None:
                return shape
            needed = needed or want * 4  # the header ran past what was read: read more
            if want >= HEADER_MOST or len(head) >= total:
                raise PlanError(f"{name}: its GGUF header is larger than {HEADER_MOST // MiB} MiB or unreadable")
            want = min(HEADER_MOST, max(needed + MiB, want * 4))


def _read_stand_in(stand_in: Path, head: bytes, total: int, name: str,
                   size: int | None) -> tuple[ModelShape | None, int]:
    """(the shape, 0) when `head` holds the whole header; (None, bytes the header needs, or 0 if unknown)."""
    from gguf import GGUFReader

    with open(stand_in, "wb") as f:
        f.write(head)
        f.truncate(max(total, len(head)))  # sparse: the weights are never fetched
    try:
        reader = GGUFReader(str(stand_in))
    except Exception:  # noqa: BLE001 - a header cut short reads as anything (zeros: duplicate empty keys)
        return None, 0
    if reader.data_offset <= len(head) or len(head) >= total:
        return _shape_of_reader(reader, name, size), 0
    return None, int(reader.data_offset)


# ---------------------------------------------------------------- need


@attrs.frozen
class Need:
    """Memory for one replica, before any per-card overhead."""

    weights: int
    kv_cache: int
    context: int
    concurrency: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache


def need_of(shape: ModelShape, context: int | None = None, concurrency: int = 1) -> Need:
    """Weights and KV cache for `concurrency` sequences of `context` tokens (the model's, at most 8192, if None)."""
    if context is None:
        context = min(shape.context or DEFAULT_CONTEXT, DEFAULT_CONTEXT)
    concurrency = max(1, concurrency)
    return Need(weights=shape.weight_bytes + shape.projector_bytes,
                kv_cache=shape.kv_bytes_per_token * context * concurrency, context=context, concurrency=concurrency)


# ---------------------------------------------------------------- the cluster


@attrs.frozen
class Card:
    node: str
    index: int
    gpu_class: str
    memory: int
    free: bool  #: healthy, on a ready node, held by no replica

    @property
    def usable(self) -> int:
        return int(self.memory * USABLE)


@attrs.frozen
class Machine:
    id: str
    ready: bool
    cards: tuple[Card, ...]
    memory_total: int
    memory_available: int


def machines_from_api(nodes: Sequence[Mapping[str, Any]], replicas: Sequence[Mapping[str, Any]] = ()) -> list[Machine]:
    """The admin API's `/nodes` and `/replicas` answers as machines with their cards, free or held."""
    held = {(r.get("node"), g) for r in replicas for g in r.get("gpus") or ()}
    out = []
    for n in nodes:
        ready = n.get("state") == "ready"
        cards = tuple(
            Card(node=n["id"], index=int(g.get("index", 0)), gpu_class=str(g.get("class") or g.get("gpu_class") or "?"),
                 memory=int(g.get("memory_total_bytes") or 0),
                 free=ready and g.get("health", "ok") == "ok" and (n["id"], g.get("index")) not in held)
            for g in n.get("gpus") or ())
        out.append(Machine(id=n["id"], ready=ready, cards=cards, memory_total=int(n.get("memory_total_bytes") or 0),
                           memory_available=int(n.get("memory_available_bytes") or 0)))
    return out


# ---------------------------------------------------------------- fitting

#: Ways a model runs, best first.
KINDS = ("one card", "cards of a node", "several nodes", "cpu")


@attrs.frozen
class Way:
    """One way a file runs here: on what, how much each card or node holds, and whether it is free now."""

    kind: str  #: one of KINDS
    gpu_class: str  #: the cards' class; empty on CPUs
    cards: int  #: cards per node (0 on CPUs)
    nodes: int
    per_unit: int  #: bytes each card (or, on CPUs, the node) holds
    unit_memory: int  #: what each card (or node) has
    where: tuple[str, ...]  #: nodes that have such hardware
    free_now: tuple[str, ...]  #: of those, where it is free now
    why: str

    def to_json(self) -> dict[str, Any]:
        value = attrs.asdict(self)
        value["where"], value["free_now"] = list(self.where), list(self.free_now)
        return value


def _gib(n: float) -> str:
    value = n / GiB
    return f"{value:.1f} GiB" if value < 100 else f"{value:.0f} GiB"


def _size(n: int) -> str:
    return _gib(n) if n >= 100 * MiB else f"{n / MiB:.1f} MiB"


def ways_to_run(shape: ModelShape, need: Need, machines: Sequence[Machine]) -> list[Way]:
    """Every way `need` fits the machines, best first: at most one per kind and card class."""
    ways: list[Way] = []
    classes: dict[str, int] = {}
    for m in machines:
        for c in m.cards:
            classes[c.gpu_class] = max(classes.get(c.gpu_class, 0), c.memory)
    gguf = shape.format == "gguf"
    for gpu_class, memory in sorted(classes.items(), key=lambda kv: kv[1]):
        usable = int(memory * USABLE) - GPU_OVERHEAD
        if usable <= 0:
            continue
        on = [m for m in machines if any(c.gpu_class == gpu_class for c in m.cards)]
        if need.total <= usable:
            where = tuple(m.id for m in on)
            free = tuple(m.id for m in on if any(c.free and c.gpu_class == gpu_class for c in m.cards))
            free_cards = sum(1 for m in on for c in m.cards if c.free and c.gpu_class == gpu_class)
            all_cards = sum(1 for m in on for c in m.cards if c.gpu_class == gpu_class)
            ways.append(Way("one card", gpu_class, 1, 1, need.total + GPU_OVERHEAD, memory, where, free,
                            f"one {gpu_class} card holds it all: {_size(need.weights)} of weights and "
                            f"{_size(need.kv_cache)} of KV cache for {need.concurrency} x {need.context} tokens, "
                            f"{_gib(need.total + GPU_OVERHEAD)} of the card's {_gib(memory)}; "
                            f"{free_cards} of {all_cards} such cards are free now"))
            continue
        count = _cards_needed(need.total, usable, shape, gguf)
        most = max((sum(1 for c in m.cards if c.gpu_class == gpu_class) for m in on), default=0)
        per_card = need.total // count + GPU_OVERHEAD if count else 0
        if count and count <= most:
            where = tuple(m.id for m in on if sum(1 for c in m.cards if c.gpu_class == gpu_class) >= count)
            free = tuple(m.id for m in on
                         if sum(1 for c in m.cards if c.gpu_class == gpu_class and c.free) >= count)
            split = "by layer (llama.cpp)" if gguf else f"tensor-parallel {count}"
            ways.append(Way("cards of a node", gpu_class, count, 1, per_card, memory, where, free,
                            f"{_gib(need.total)} ({_gib(need.weights)} weights, {_gib(need.kv_cache)} KV cache) "
                            f"is more than one {gpu_class} card's {_gib(usable)}; split {split} over {count} cards "
                            f"of one node it is {_gib(per_card)} a card; {len(free)} of {len(where)} nodes with "
                            f"{count} such cards have them free now"))
            continue
        if gguf or not most:
            continue
        per_node = _pow2_at_most(most, shape.heads)
        nodes = math.ceil(need.total / (usable * per_node)) if per_node else 0
        nodes = _pipeline_stages(nodes, shape.layers)
        if per_node and nodes and nodes <= len(on):
            total_cards = per_node * nodes
            per_card = need.total // total_cards + GPU_OVERHEAD
            full = [m for m in on if sum(1 for c in m.cards if c.gpu_class == gpu_class) >= per_node]
            free = [m for m in full if sum(1 for c in m.cards if c.gpu_class == gpu_class and c.free) >= per_node]
            if len(full) >= nodes:
                ways.append(Way("several nodes", gpu_class, per_node, nodes, per_card, memory,
                                tuple(m.id for m in full), tuple(m.id for m in free) if len(free) >= nodes else (),
                                f"{_gib(need.total)} is more than any node's {gpu_class} cards hold; across "
                                f"{nodes} nodes x {per_node} cards over a fabric (vLLM or SGLang, tensor-parallel "
                                f"{per_node}, pipeline {nodes}) it is {_gib(per_card)} a card; "
                                + (f"{len(free)} such nodes are free now" if len(free) >= nodes
                                   else f"only {len(free)} such nodes are free now")))
    cpu_need = need.total + CPU_OVERHEAD
    hosts = [m for m in machines if m.memory_total and cpu_need <= m.memory_total * HOST_USABLE]
    if hosts and gguf:
        plain = [m for m in hosts if not m.cards] or hosts
        free = tuple(m.id for m in plain if m.ready and cpu_need <= m.memory_available)
        biggest = max(m.memory_total for m in plain)
        ways.append(Way("cpu", "", 0, 1, cpu_need, biggest, tuple(m.id for m in plain), free,
                        f"on a node's CPUs (llama.cpp) it takes {_gib(cpu_need)} of host memory; "
                        + (f"{len(free)} of {len(plain)} such nodes have that free now" if free
                           else "no such node has that much free now")
                        + ("; expect a few tokens a second, not a GPU's speed" if shape.weight_bytes > 2 * GiB else "")))
    ways.sort(key=lambda w: (KINDS.index(w.kind), w.cards * w.nodes, w.unit_memory))
    return ways


def _cards_needed(total: int, usable: int, shape: ModelShape, gguf: bool) -> int:
    count = math.ceil(total / usable)
    if gguf:
        return count
    size = 2
    while size < count or (shape.heads % size) or (shape.kv_heads % size and size % shape.kv_heads):
        size *= 2
        if size > 64:
            return 0
    return size


def _pow2_at_most(cards: int, heads: int) -> int:
    size = 1
    while size * 2 <= cards and heads % (size * 2) == 0:
        size *= 2
    return size


def _pipeline_stages(nodes: int, layers: int) -> int:
    while nodes and nodes <= layers and layers % nodes and nodes < 64:
        nodes += 1  # a stage count that splits the layers evenly reads better; vLLM takes any
    return nodes


# ---------------------------------------------------------------- the plan


@attrs.frozen
class Candidate:
    """One file of the source, and how it runs here."""

    shape: ModelShape
    need: Need
    ways: tuple[Way, ...]
    best: bool = False

    @property
    def fits(self) -> bool:
        return bool(self.ways)

    @property
    def why(self) -> str:
        if self.ways:
            return self.ways[0].why
        return _nowhere(self.shape, self.need)

    def rank(self) -> tuple:
        kind = KINDS.index(self.ways[0].kind) if self.ways else len(KINDS)
        first = self.ways[0] if self.ways else None
        units = first.cards * first.nodes if first else 0
        return (kind, units, -self.shape.quality, self.need.total)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.shape.file, "format": self.shape.format, "quantisation": self.shape.quantisation,
                "best": self.best, "fits": self.fits, "why": self.why, "shape": self.shape.to_json(),
                "weights_bytes": self.need.weights, "kv_cache_bytes": self.need.kv_cache,
                "total_bytes": self.need.total, "ways": [w.to_json() for w in self.ways]}


def _nowhere(shape: ModelShape, need: Need) -> str:
    what = (f"{_gib(need.total)} ({_gib(need.weights)} weights, {_gib(need.kv_cache)} KV cache for "
            f"{need.concurrency} x {need.context} tokens)")
    if shape.format == "gguf":
        return (f"{what} fits no node here: llama.cpp runs a GGUF on one node's cards or CPUs; "
                "a smaller quantisation, a shorter --context, or original weights across nodes")
    return f"{what} fits nowhere here, not even across every node's cards; a quantised version, or a shorter --context"


@attrs.frozen
class Plan:
    source: str
    context: int | None
    concurrency: int
    candidates: tuple[Candidate, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "context": self.context, "concurrency": self.concurrency,
                "files": [c.to_json() for c in self.candidates]}


def plan(source: str, shapes: Sequence[ModelShape], machines: Sequence[Machine], *, context: int | None = None,
         concurrency: int = 1) -> Plan:
    """Each shape with every way it fits, the best file marked and first."""
    candidates = []
    for shape in shapes:
        need = need_of(shape, context, concurrency)
        candidates.append(Candidate(shape, need, tuple(ways_to_run(shape, need, machines))))
    candidates.sort(key=Candidate.rank)
    if candidates and candidates[0].fits:
        candidates[0] = attrs.evolve(candidates[0], best=True)
    return Plan(source, context, concurrency, tuple(candidates))


def _way_line(w: Way) -> str:
    if w.kind == "one card":
        on = f"one {w.gpu_class} card"
    elif w.kind == "cards of a node":
        on = f"{w.cards} {w.gpu_class} cards of one node"
    elif w.kind == "several nodes":
        on = f"{w.nodes} nodes x {w.cards} {w.gpu_class} cards"
    else:
        on = "a node's CPUs"
    free = f"free now on {', '.join(w.free_now[:4])}" + (" ..." if len(w.free_now) > 4 else "") \
        if w.free_now else "busy now (it waits for the hardware, or runs elsewhere with a fallback profile)"
    return f"{on}, {_gib(w.per_unit)} each: {free}"


def render_text(p: Plan) -> str:
    """The plan for a person: a line per file (best marked ★), then why, then every way it fits."""
    lines = []
    if not p.candidates:
        return f"{p.source}: no model files\n"
    first = p.candidates[0]
    lines.append(f"{p.source}: {first.shape.architecture}, {first.shape.layers} layers, {first.shape.heads} heads "
                 f"({first.shape.kv_heads} KV), context {first.need.context} x {first.need.concurrency}")
    for c in p.candidates:
        mark = "★" if c.best else " "
        fit = c.ways[0].kind if c.ways else "fits nowhere"
        lines.append(f"{mark} {c.shape.file}  {c.shape.quantisation}  weights {_size(c.need.weights)}  "
                     f"KV {_size(c.need.kv_cache)}  ->  {fit}")
        lines.append(f"    {c.why}")
        for w in c.ways:
            lines.append(f"    - {_way_line(w)}")
    return "\n".join(lines) + "\n"
