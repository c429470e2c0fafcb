"""The one file's start (zipapp_boot.py): which part it runs, and the one line that refuses the rest."""

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = {"version": "1.2.3", "id": "abc", "pythons": ["3.10", "3.11", "3.12", "3.13"], "arch": "x86_64"}


@pytest.fixture(scope="module")
def boot():
    spec = importlib.util.spec_from_file_location("zipapp_boot", ROOT / "zipapp_boot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_each_supported_python_gets_its_own_part(boot, minor):
    assert boot.choose(BUILD, (3, minor, 1), "cpython", "linux", "x86_64") == (f"cp3{minor}", None)


def test_a_machine_that_spells_its_arch_otherwise_is_the_same(boot):
    arm = dict(BUILD, arch="aarch64")
    assert boot.choose(arm, (3, 12, 0), "cpython", "linux", "arm64") == ("cp312", None)


@pytest.mark.parametrize("version", [(3, 9, 18), (3, 14, 0), (3, 6, 15)])
def test_an_unsupported_python_is_refused_in_one_line(boot, version):
    part, line = boot.choose(BUILD, version, "cpython", "linux", "x86_64")
    assert part is None and "\n" not in line
    here = ".".join(map(str, version))
    assert line == (f"llmgw 1.2.3: this file runs on CPython 3.10 to 3.13 on Linux x86_64, not on CPython {here} "
                    "on Linux x86_64; run it with a supported python3 (python3.12 llmgw.pyz)")


def test_the_other_arch_is_told_which_file_to_use(boot):
    part, line = boot.choose(BUILD, (3, 12, 0), "cpython", "linux", "aarch64")
    assert part is None
    assert "not on CPython 3.12.0 on Linux aarch64" in line
    assert line.endswith("use llmgw-1.2.3-linux-aarch64.pyz (python3 build.py --arch aarch64)")


def test_another_system_or_implementation_is_refused(boot):
    assert boot.choose(BUILD, (3, 12, 0), "cpython", "darwin", "arm64")[1].endswith("; run it on Linux")
    part, line = boot.choose(BUILD, (3, 11, 0), "pypy", "linux", "x86_64")
    assert part is None and "not on PyPy 3.11.0 on Linux x86_64" in line


def test_python_3_6_can_read_it():
    ast.parse((ROOT / "zipapp_boot.py").read_text(), feature_version=(3, 6))
