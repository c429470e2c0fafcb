"""tests/gpu/check.sh, the prepared GPU check: it parses, and without a GPU it stops at once saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "check.sh"


def test_the_gpu_check_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_without_a_gpu_it_fails_in_one_summary_line(tmp_path):
    if shutil.which("nvidia-smi"):  # pragma: no cover - a GPU machine runs the check itself
        return
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin", "LLMGW_GPU_CHECK_DIR": str(tmp_path / "work")})
    assert out.returncode == 1
    assert out.stdout.strip().splitlines()[-1].startswith("SUMMARY gpu-check FAILED at 'preflight': no NVIDIA GPU")
