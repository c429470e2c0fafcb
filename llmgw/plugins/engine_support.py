"""Pieces every engine plugin needs: the GPU environment, and what a profile may pass.

What a profile may pass is an allow list per engine (`ArgPolicy`, in
`llmgw.plugins.engine_args`); everything else is refused, with the reason.
"""

from __future__ import annotations

from llmgw.plugins.engine_args import COMMON_ENV, ArgPolicy, flag_name, flag_table
from llmgw.plugins.types import LaunchSpec

__all__ = ["ArgPolicy", "COMMON_ENV", "GPU_ENV", "flag_name", "flag_table", "gpu_env"]

#: What `gpu_env` sets: a profile may not.
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def gpu_env(spec: LaunchSpec) -> dict[str, str]:
    """Which cards the process sees, numbered as nvidia-smi numbers them."""
    if not spec.gpus:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(spec.devices) if spec.devices else ",".join(str(g) for g in spec.gpus),
    }
