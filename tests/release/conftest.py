"""Fixtures for the release tests: the CLI run in this process, a key pair, a release folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.cli.main import main


class Ran:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def llmgw(capsys):
    """`llmgw ARGS…` in this process: (exit status, stdout, stderr)."""

    def run(*argv: str) -> Ran:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def key_id_of(out: str) -> str:
    return out.split("key id ", 1)[1].split()[0]


@pytest.fixture
def keys(tmp_path, llmgw):
    """A release key pair: (folder, key id)."""
    folder = tmp_path / "keys"
    ran = llmgw("release", "keygen", "--out", folder)
    assert ran.code == 0, ran.err
    return folder, key_id_of(ran.out)


def make_release(folder: Path, version: str = "1.4.0") -> Path:
    folder.mkdir(parents=True)
    (folder / f"llmgw-{version}-linux-x86_64.pyz").write_bytes(b"PK x86_64 zipapp " * 100)
    (folder / f"llmgw-{version}-linux-aarch64.pyz").write_bytes(b"PK aarch64 zipapp " * 100)
    (folder / "engines").mkdir()
    (folder / "engines" / "llama_cpp_python-0.3.36.tar.gz").write_bytes(b"\x1f\x8b sdist " * 50)
    return folder


@pytest.fixture
def release(tmp_path) -> Path:
    return make_release(tmp_path / "release-1.4.0")
