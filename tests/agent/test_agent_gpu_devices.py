"""A shard given a MIG instance sees it by its UUID; a card in MIG mode is not a device of its own."""

from __future__ import annotations

import os

from llmgw.agent.discovery import discover
from llmgw.agent.gpu_devices import device_numbers, visible_devices
from llmgw.plugins.engine_support import gpu_env
from llmgw.plugins.types import LaunchSpec

DATA = os.path.join(os.path.dirname(__file__), "discovery", "data")


def _smi(args):
    if args == ["-L"]:
        return open(os.path.join(DATA, "smi_a100x2_mig.L.txt")).read()
    if args[0] == "mig":  # -lgi, -lci: the fixtures' notes are "#" lines, which nvidia-smi never prints
        with open(os.path.join(DATA, f"smi_a100x2_mig.{args[1][1:]}.txt")) as f:
            return "".join(line for line in f if not line.startswith("#"))
    fields = None
    rows = []
    for line in open(os.path.join(DATA, "smi_a100x2_mig.csv")):
        if line.startswith("# fields:"):
            fields = line.split(":", 1)[1].strip().split(",")
        elif line.strip() and not line.startswith("#"):
            rows.append([c.strip() for c in line.split(",")])
    wanted = [a for a in args if a.startswith("--query-gpu=")][0].split("=", 1)[1].split(",")
    cols = [fields.index(x) for x in wanted]
    return "".join(", ".join(r[c] for c in cols) + "\n" for r in rows)


class _NoNvml:
    class NVMLError(Exception):
        value = 12

    def nvmlInit(self):
        raise self.NVMLError()


async def _inventory(tmp_path):
    return await discover(nvml=_NoNvml(), smi_runner=_smi, proc=str(tmp_path), sys=str(tmp_path), kernel_log="")


async def test_mig_instances_are_given_by_uuid_and_the_card_itself_never(tmp_path):
    inv = await _inventory(tmp_path)
    numbers = device_numbers(inv)
    assert sorted(numbers) == [1, 1000, 1001, 1002]  # card 0 is in MIG mode: only its instances
    assert numbers[1001] == "MIG-6b4cb242-4a23-4596-a217-beaddbc496cb"
    devices = visible_devices(inv, (1001,))
    env = gpu_env(LaunchSpec(model="m", weights="/w", host="127.0.0.1", port=1, api_key="k", gpus=(1001,),
                             devices=devices))
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-6b4cb242-4a23-4596-a217-beaddbc496cb"
    # A whole card keeps its index.
    assert visible_devices(inv, (1,)) == ()
