"""`llmgw server backup` and `llmgw server restore` as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.cli.main import main
from llmgw.store import open_store
from llmgw.store.migrate import load_migrations

from .conftest import check_seeded, lay_out, seed

NEWEST = load_migrations("sqlite")[-1].version


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, "\n".join(line for line in err.splitlines() if "level=" not in line)


def seeded_machine(tmp_path):
    """A machine whose store holds seed()'s data (the commands run their own loop, so the tests have none)."""
    machine = lay_out(tmp_path / "cp1")

    async def go():
        store = await open_store(machine.store_dsn)
        try:
            return await seed(store)
        finally:
            await store.close()

    return machine, asyncio.run(go())


def check(dsn: str, seeded) -> None:
    async def go():
        store = await open_store(dsn)
        try:
            await check_seeded(store, seeded)
        finally:
            await store.close()

    asyncio.run(go())


def test_backup_prints_path_size_and_sha256(capsys, tmp_path):
    machine, _ = seeded_machine(tmp_path)
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    lines = out.splitlines()
    path = lines[0]
    assert path.startswith(str(machine.db.parent / "backups" / "llmgw-backup-")) and os.path.isfile(path)
    assert lines[1].startswith("  size     ") and f"({os.path.getsize(path)} bytes)" in lines[1]
    assert lines[2] == "  sha256   " + Path(path + ".sha256").read_text().split()[0]
    assert lines[3] == f"  holds    the sqlite store (schema version {NEWEST}) and 5 configuration file(s) from " \
        f"{machine.etc}"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # --config before the subcommand works as well; --to and --json.
    code, out, err = run(capsys, "server", "--config", str(machine.config_path), "backup", "--json",
                         "--to", str(tmp_path / "elsewhere"))
    assert code == 0, err
    made = json.loads(out)
    assert made["path"].startswith(str(tmp_path / "elsewhere")) and made["store"] == "sqlite"
    assert made["config_files"] == 5 and len(made["sha256"]) == 64


def test_backup_refusals_say_why(capsys, tmp_path):
    machine = lay_out(tmp_path / "cp1")
    code, _, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 1 and err.startswith("llmgw server backup: there is no SQLite store at")
    code, _, err = run(capsys, "server", "backup", "--config", str(tmp_path / "missing.yaml"))
    assert code == 2 and f"{tmp_path / 'missing.yaml'}" in err


def test_restore_asks_checks_and_restores(capsys, tmp_path, monkeypatch):
    machine, seeded = seeded_machine(tmp_path)
    assert main(["server", "backup", "--config", str(machine.config_path)]) == 0
    archive = capsys.readouterr().out.splitlines()[0]
    fresh = lay_out(tmp_path / "cp2")

    # Not on a terminal and no --yes: refused, nothing done.
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path))
    assert code == 2 and "pass --yes" in err and not fresh.db.exists()
    assert out.splitlines()[0] == f"Archive {archive}"

    # On a terminal, only y goes on.
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, out, _ = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path))
    assert code == 1 and out.splitlines()[-1] == "Nothing was changed." and not fresh.db.exists()

    code, out, _ = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path), "--dry-run")
    assert code == 0 and out.splitlines()[-1] == "Dry run: nothing was changed." and not fresh.db.exists()

    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path))
    assert code == 0, err
    assert f"store: {fresh.db} restored" in out.splitlines()
    check(fresh.store_dsn, seeded)


def test_restore_refuses_a_damaged_archive_and_changes_nothing(capsys, tmp_path):
    machine, _ = seeded_machine(tmp_path)
    assert main(["server", "backup", "--config", str(machine.config_path)]) == 0
    archive = capsys.readouterr().out.splitlines()[0]
    raw = bytearray(Path(archive).read_bytes())
    raw[len(raw) // 2] ^= 0x55
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bytes(raw))
    before = machine.db.read_bytes()
    code, out, err = run(capsys, "server", "restore", str(damaged), "--config", str(machine.config_path), "--yes",
                         "--config-too")
    assert code == 1 and out == ""
    # Where the flipped byte lands decides which check finds it first; every one names the archive.
    assert err.startswith(f"llmgw server restore: {damaged}: ") and err.endswith("; nothing was changed")
    assert "damaged" in err or "manifest" in err
    assert machine.db.read_bytes() == before
    assert not any(name.endswith(".before-restore") for name in os.listdir(machine.db.parent))


@pytest.mark.slow
def test_backup_and_restore_as_commands(tmp_path):
    machine, seeded = seeded_machine(tmp_path)
    env = {**os.environ, "LLMGW_CONFIG": str(machine.config_path)}
    done = subprocess.run([sys.executable, "-m", "llmgw", "server", "backup"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    archive = done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[2].split()[1] == Path(archive + ".sha256").read_text().split()[0]
    fresh = lay_out(tmp_path / "cp2")
    done = subprocess.run([sys.executable, "-m", "llmgw", "server", "restore", archive, "--config",
                           str(fresh.config_path), "--yes"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    check(fresh.store_dsn, seeded)
