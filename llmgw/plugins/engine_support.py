"""Pieces every engine plugin needs: the GPU environment, and what a profile may pass.

What a profile may pass is an allow list per engine (`ArgPolicy`, in
`llmgw.plugins.engine_args`); everything else is refused, with the reason.
"""

from __future__ import annotations

from llmgw.plugins.engine_args import COMMON_ENV, ArgPolicy, flag_name, flag_table
from llmgw.plugins.types import LaunchSpec

__all__ = ["ArgPolicy", "COMMON_ENV", "GPU_ENV", "flag_name", "flag_table", "gpu_env", "parallel_sizes"]

#: What `gpu_env` sets: a profile may not.
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def parallel_sizes(spec: LaunchSpec) -> tuple[int, int]:
    """(tensor parallel, pipeline parallel) for the whole replica: as the profile sets them, else every card of
    every node in one tensor-parallel group."""
    pp = max(1, spec.pipeline_parallel)
    tp = spec.tensor_parallel or max(1, len(spec.gpus) * max(1, spec.nnodes) // pp)
    return tp, pp


def gpu_env(spec: LaunchSpec) -> dict[str, str]:
    """Which cards the process sees, numbered as nvidia-smi numbers them."""
    if not spec.gpus:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(spec.devices) if spec.devices else ",".join(str(g) for g in spec.gpus),
    }
