"""`llmgw server init` as a form on a terminal (tmux types the answers), and init run from a zipapp: the file
copied to the layout's binary and every unit running that copy."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgw.cli.main import main
from llmgw.config import load_agent_config, load_server_config
from llmgw.install.layout import Layout
from llmgw.install.service import unit_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # real inits: key pairs, the store's migrations, argon2


class Terminal:
    """A tmux session of its own, 120x40: type with send-keys, read with capture-pane."""

    def __init__(self, name: str) -> None:
        self.base = ["tmux", "-L", name]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True, timeout=20).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-J", "-S", "-200", "-t", "init")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never showed; the screen was:\n{shown}")

    def answer(self, question: str, text: str) -> None:
        self.wait_for(question)
        if text:
            self("send-keys", "-t", "init", "-l", text)
        self("send-keys", "-t", "init", "Enter")
        time.sleep(0.2)


@pytest.fixture
def terminal():
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed; .ci/run installs it")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    t = Terminal(f"llmgw-init-test-{os.getpid()}")
    yield t
    subprocess.run([*t.base, "kill-server"], capture_output=True, check=False)


def test_the_form_asks_each_field_on_a_terminal_and_writes_what_was_answered(tmp_path, terminal):
    root = tmp_path / "m"
    done = tmp_path / "exit-status"
    command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m llmgw server init "
               f"--root {shlex.quote(str(root))} --no-start; echo $? > {shlex.quote(str(done))}; sleep 30")
    terminal("new-session", "-d", "-s", "init", "-x", "120", "-y", "40", command)
    shown = terminal.wait_for("Enter keeps the default in [brackets].")
    terminal.answer("Names and addresses", "cp1.example.com, 192.0.2.10")
    terminal.answer("Administrator's email", "ops@example.com")
    terminal.answer("Their first password", "a-long-first-password-7")  # not echoed
    terminal.answer("Store", "")  # the default: SQLite in the layout
    terminal.answer("Mirror", "")
    terminal.answer("Is this machine a node too", "yes")
    terminal.answer("Its node id", "cp1")
    terminal.answer("First model", "")  # the default with a node: sim
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    shown = terminal.screen()
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
