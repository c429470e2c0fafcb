"""Where llama.cpp put a model, as its own start-up output tells it.

llama-server says, while loading, how many layers it offloaded to a GPU
(`load_tensors: offloaded 49/49 layers to GPU`), which buffers hold the
weights (`CUDA0 model buffer size = …` on a card; `CPU_Mapped`,
`CPU_REPACK` or `CPU model buffer size` in host memory), which devices it
uses, and when it found none (`no usable GPU found`). A shard placed on GPUs
whose engine computes on the CPU would answer, slowly, while the cards it
holds in the inventory stand idle: the agent fails it, in words.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import attrs

__all__ = ["LlamaPlacement", "read_llama_placement", "gpu_placement_problem", "describe_placement"]

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER_NAME = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*) model buffer size\s*=\s*([0-9.]+) MiB")
_USING = re.compile(r"using device ([A-Za-z]+\d+) \(([^)]*)\)")
_NO_GPU = re.compile(
    r"no usable GPU found|found 0 (?:CUDA|ROCm|Vulkan|SYCL) devices|ggml_cuda_init: failed to initialize|"
    r"--gpu-layers option will be ignored|compiled without GPU support"
)


@attrs.frozen
class LlamaPlacement:
    """What llama.cpp said about where the model went."""

    offloaded: int | None = None  #: layers on a device, when it said
    total: int | None = None  #: layers in all
    device_buffers: dict[str, float] = attrs.Factory(dict)  #: CUDA0, ROCm0, Vulkan0, Metal… → MiB
    host_buffers: dict[str, float] = attrs.Factory(dict)  #: CPU, CPU_Mapped, CPU_REPACK… → MiB
    devices: tuple[str, ...] = ()  #: "CUDA0: NVIDIA H100 80GB HBM3"
    no_gpu: bool = False  #: it said it found no device it could use

    @property
    def on_cpu(self) -> bool:
        """Whether the model is computed on the CPU, by llama.cpp's own account."""
        if self.no_gpu:
            return True
        if self.total:
            return not self.offloaded
        return bool(self.host_buffers) and not self.device_buffers

    @property
    def backend(self) -> str:
        if self.on_cpu:
            return "CPU"
        names = list(self.device_buffers) or [d.split(":", 1)[0] for d in self.devices]
        if names:
            return re.sub(r"\d+$", "", names[0])
        return "GPU"


def read_llama_placement(lines: Iterable[str]) -> LlamaPlacement | None:
    """The placement llama.cpp's output states, or None when the output says nothing about it."""
    offloaded = total = None
    device: dict[str, float] = {}
    host: dict[str, float] = {}
    devices: list[str] = []
    no_gpu = False
    said = False
    for line in lines:
        if m := _OFFLOADED.search(line):
            offloaded, total, said = int(m.group(1)), int(m.group(2)), True
        if m := _BUFFER_NAME.search(line):
            name, mib = m.group(1), float(m.group(2))
            in_host = name.upper().startswith("CPU") or name.lower().endswith("_host")  # CUDA_Host: pinned host memory
            (host if in_host else device)[name] = mib
            said = True
        if (m := _USING.search(line)) and m.group(1) not in [d.split(":")[0] for d in devices]:
            devices.append(f"{m.group(1)}: {m.group(2).strip()}")
            said = True
        if _NO_GPU.search(line):
            no_gpu = said = True
    if not said:
        return None
    return LlamaPlacement(offloaded=offloaded, total=total, device_buffers=device, host_buffers=host,
                          devices=tuple(devices), no_gpu=no_gpu)


def describe_placement(p: LlamaPlacement) -> str:
    """One phrase: `CUDA, 49 of 49 layers on CUDA0 (4403 MiB)`."""
    parts = [p.backend]
    if p.total:
        parts.append(f"{p.offloaded or 0} of {p.total} layers offloaded")
    buffers = p.device_buffers or p.host_buffers
    if buffers:
        parts.append("weights in " + ", ".join(f"{k} ({v:.0f} MiB)" for k, v in buffers.items()))
    return ", ".join(parts)


def gpu_placement_problem(gpus: Sequence[int], lines: Iterable[str]) -> str | None:
    """Why a shard given `gpus` must fail because llama.cpp put its model on the CPU; None when it may run."""
    if not gpus:
        return None
    p = read_llama_placement(lines)
    if p is None or not p.on_cpu:
        return None
    cards = ", ".join(str(g) for g in gpus)
    if p.no_gpu:
        why = "this llama-server saw no GPU it could use (a build without CUDA, or a driver it cannot load)"
    elif p.total:
        why = f"it offloaded {p.offloaded or 0} of {p.total} layers"
    else:
        why = "its weights are in " + ", ".join(p.host_buffers) + " buffers and none is on a GPU"
    return (f"placed on GPU {cards}, but llama.cpp put the model on the CPU: {why}; "
            "install a llama-server built with CUDA on this node, or give the profile no GPUs")
