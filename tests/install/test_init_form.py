"""`llmgw server init` as a form on a terminal (tmux types the answers), and init run from a zipapp: the file
copied to the layout's binary and every unit running that copy."""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from tmux_screen import Screen, tmux_screen

from llmgw.cli.main import main
from llmgw.config import load_agent_config, load_server_config
from llmgw.install.layout import Layout
from llmgw.install.service import unit_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # real inits: key pairs, the store's migrations, argon2


def answer(terminal: Screen, question: str, text: str) -> None:
    """Once `question` shows, type `text` (nothing: the default) and Enter."""
    terminal.wait_for(question)
    if text:
        terminal.keys(text, literal=True)
    terminal.keys("Enter")


@pytest.fixture
def terminal():
    with tmux_screen("llmgw-init-test", "init", scrollback=200, pause=0.2) as screen:
        yield screen


def test_the_form_asks_each_field_on_a_terminal_and_writes_what_was_answered(tmp_path, terminal):
    root = tmp_path / "m"
    done = tmp_path / "exit-status"
    command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m llmgw server init "
               f"--root {shlex.quote(str(root))} --no-start; echo $? > {shlex.quote(str(done))}; sleep 30")
    terminal.start(command, width=120, height=40)
    shown = terminal.wait_for("Enter keeps the default in [brackets].")
    answer(terminal, "Names and addresses", "cp1.example.com, 192.0.2.10")
    answer(terminal, "Administrator's email", "ops@example.com")
    answer(terminal, "Their first password", "a-long-first-password-7")  # not echoed
    answer(terminal, "Store", "")  # the default: SQLite in the layout
    answer(terminal, "Mirror", "")
    answer(terminal, "Is this machine a node too", "yes")
    answer(terminal, "Its node id", "cp1")
    answer(terminal, "First model", "")  # the default with a node: sim
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    shown = terminal.text()
    assert done.exists() and done.read_text().strip() == "0", shown
    assert "a-long-first-password-7" not in shown
    assert "Installed; nothing started (--no-start)." in shown
    L = Layout(root)
    config = load_server_config(L.server_yaml)
    assert [m.name for m in config.models] == ["llmgw-sim"]
    assert config.store.dsn.reveal() == str(L.store)
    assert load_agent_config(L.agent_yaml).node_id == "cp1"
    from llmgw.pki import describe, load_certificate

    cert = describe(load_certificate(L.tls / "server.pem"))
    assert "cp1.example.com" in cert["dns_names"] and "192.0.2.10" in cert["ip_addresses"]


def test_init_from_a_zipapp_copies_it_to_the_binary_and_the_units_run_that_copy(tmp_path, capsys, monkeypatch):
    pyz = tmp_path / "dist" / "llmgw.pyz"
    pyz.parent.mkdir()
    pyz.write_bytes(b"PK\x05\x06" + os.urandom(4096))  # what runs is not read here: only copied
    monkeypatch.setenv("LLMGW_PYZ", str(pyz))  # as the zipapp's own start sets it
    root = tmp_path / "m"
    argv = ["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com", "--host",
            "cp1.example.com", "--node", "--node-id", "cp1", "--no-start"]
    assert main(argv) == 0
    L = Layout(root)
    out = capsys.readouterr().out
    assert f"{L.binary}: copied this zipapp" in out
    assert hashlib.sha256(L.binary.read_bytes()).digest() == hashlib.sha256(pyz.read_bytes()).digest()
    assert os.stat(L.binary).st_mode & 0o777 == 0o755
    for role, config in (("server", L.server_yaml), ("agent", L.agent_yaml)):
        command = unit_argv(L.unit(role).read_text())
        assert command[1:] == [str(L.binary), role, "--config", str(config)], command
        assert Path(command[0]).name.startswith("python3")
    # Again: the same file is left as it is.
    assert main(argv) == 0
    assert f"{L.binary}: unchanged" in capsys.readouterr().out
    # And wipe takes the copy away with the rest.
    assert main(["wipe", "--yes", "--root", str(root)]) == 0
    assert not L.binary.exists() and not (root / "usr/local/lib/llmgw").exists()
