"""GPU classes: the model and the marketed memory, from what the driver reports."""

from __future__ import annotations

import pytest

from llmgw.agent.discovery.gpu_class import (
    gpu_class, is_mig_class, marketed_gb, mig_class, mig_profile, mig_profile_memory_gb, model_slug,
)

# (name as the driver gives it, memory.total in MiB as it reports it, class)
CARDS = [
    ("NVIDIA H100 80GB HBM3", 81559, "h100-80gb"),
    ("NVIDIA H100 PCIe", 81559, "h100-80gb"),
    ("NVIDIA H100 NVL", 95830, "h100-94gb"),
    ("NVIDIA A100-SXM4-40GB", 40960, "a100-40gb"),
    ("NVIDIA A100-PCIE-40GB", 40960, "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", 81920, "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", 81920, "a100-80gb"),
    ("NVIDIA L40S", 46068, "l40s-48gb"),
    ("NVIDIA GeForce RTX 4090", 24564, "rtx4090-24gb"),
    ("NVIDIA H200", 143771, "h200-141gb"),
    ("NVIDIA B200", 183359, "b200-180gb"),
    ("NVIDIA A10G", 23028, "a10g-24gb"),
    ("NVIDIA A10", 23028, "a10-24gb"),
    ("Tesla T4", 15360, "t4-16gb"),
    ("Tesla T4", 15109, "t4-16gb"),
    ("NVIDIA L4", 23034, "l4-24gb"),
    ("NVIDIA L40", 46068, "l40-48gb"),
    ("NVIDIA GH200 480GB", 97871, "gh200-96gb"),
    ("Tesla V100-SXM2-32GB", 32768, "v100-32gb"),
    ("Tesla V100-PCIE-16GB", 16160, "v100-16gb"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "rtx6000ada-48gb"),
    ("NVIDIA RTX A6000", 49140, "rtxa6000-48gb"),
    ("NVIDIA GeForce RTX 3090 Ti", 24564, "rtx3090ti-24gb"),
    ("NVIDIA GeForce RTX 4070 SUPER", 12282, "rtx4070super-12gb"),
    ("NVIDIA H20", 97871, "h20-96gb"),
]


@pytest.mark.parametrize(("name", "mib", "want"), CARDS)
def test_each_card_gets_its_class(name: str, mib: int, want: str) -> None:
    assert gpu_class(name, mib) == want


def test_memory_is_rounded_up_to_the_size_on_the_box() -> None:
    # The driver keeps some memory back, and GB are sold as 10^9 bytes.
    assert marketed_gb(81559) == 80
    assert marketed_gb(46068) == 48
    assert marketed_gb(40960) == 40
    assert marketed_gb(143771) == 141
    # A size nobody sells is the nearest whole GiB rather than a wild guess.
    assert marketed_gb(36 * 1024) == 36
    assert marketed_gb(0) == 0


def test_an_unknown_card_gets_a_slug_of_its_name() -> None:
    assert gpu_class("Quadro GP100", 16278) == "gp100-16gb"
    assert gpu_class("NVIDIA Super Card X-9000 (engineering sample)", 65536) == "super-card-x-9000-engineering-sample-64gb"
    assert model_slug("NVIDIA") == "gpu"


def test_mig_classes_name_the_card_and_the_profile() -> None:
    assert mig_class("a100-40gb", "3g.20gb") == "a100-40gb-mig-3g.20gb"
    assert mig_class("h100-80gb", "1g.10gb+me") == "h100-80gb-mig-1g.10gb-me"
    assert is_mig_class("a100-40gb-mig-3g.20gb") and not is_mig_class("a100-40gb")
    assert mig_profile_memory_gb("2g.10gb") == 10 and mig_profile_memory_gb("whole") is None
    assert mig_profile(1, 9728) == "1g.10gb"
    assert mig_profile(3, 40192) == "3g.40gb"
