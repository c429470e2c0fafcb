"""Pieces every engine plugin needs: GPU environment and argument screening.

Engines run as root on the node, so a model's profile must not be able to
make them run code or write files: each engine lists the flags and
environment variables that would, and `screen` turns any use into problems.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from llmgw.plugins.types import LaunchSpec

# Environment that changes what code a process loads, for every engine.
ALWAYS_DENIED_ENV = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PATH",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "HF_HOME",
    "TRANSFORMERS_CACHE",
)


def gpu_env(spec: LaunchSpec) -> dict[str, str]:
    """Which cards the process sees, numbered as nvidia-smi numbers them."""
    if not spec.gpus:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpus),
    }


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def screen(
    args: Sequence[str],
    env: Mapping[str, str],
    denied_flags: Iterable[str] = (),
    managed_flags: Iterable[str] = (),
    denied_env: Iterable[str] = (),
) -> list[str]:
    """Problems with a profile's args/env: denied or llmgw-managed flags, unsafe variables."""
    problems: list[str] = []
    denied = set(denied_flags)
    managed = set(managed_flags)
    for i, arg in enumerate(args):
        name = flag_name(arg)
        if name in denied:
            problems.append(f"args[{i}]: {name} would let the model run code or write files as root; remove it")
        elif name in managed:
            problems.append(f"args[{i}]: {name} is set by llmgw for each replica; remove it")
    bad_env = set(ALWAYS_DENIED_ENV) | set(denied_env)
    for name in env:
        if name in bad_env or name.startswith("LD_"):
            problems.append(f"env.{name}: changes what code the engine loads; remove it")
    return problems
