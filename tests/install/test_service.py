"""Service units: what they hold, that systemd accepts them, and starting a role without systemd."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from llmgw.install.layout import Layout
from llmgw.install.service import (
    MARKER,
    ServiceError,
    install_service,
    remove_service,
    service_running,
    start_service,
    stop_service,
    unit_argv,
)


def _sleeper() -> list[str]:
    # "llmgw" in the command line: the pid file is only believed for an llmgw process.
    return [sys.executable, "-c", "import time; time.sleep(60)  # llmgw test"]


@pytest.mark.parametrize("role,user", [("server", "llmgw"), ("agent", None), ("mirror", "llmgw")])
def test_units_pass_systemd_analyze_verify(tmp_path, role, user):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    layout = Layout(tmp_path)
    argv = [sys.executable, str(layout.binary), role, "--config", str(layout.etc / f"{role}.yaml")]
    said = install_service(layout, role, argv, user=user)
    assert said.endswith(f"wrote the unit for llmgw {role}")
    text = layout.unit(role).read_text()
    assert text.startswith(MARKER)
    assert "Restart=on-failure" in text
    assert ("User=llmgw" in text) == (user is not None)
    if role == "agent":
        assert "KillMode=process" in text  # engines outlive an agent restart
    else:
        assert "ProtectSystem=strict" in text and "NoNewPrivileges=yes" in text
    assert unit_argv(text) == argv
    done = subprocess.run(["systemd-analyze", "verify", str(layout.unit(role))],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "Failed to" in done.stderr and "bus" in done.stderr.lower():
        pytest.skip(f"systemd-analyze verify cannot run here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert "llmgw" not in done.stderr, done.stderr  # no warning about our unit


def test_second_install_is_unchanged_and_an_operators_unit_is_left_alone(tmp_path):
    layout = Layout(tmp_path)
    install_service(layout, "server", _sleeper(), user="llmgw")
    assert install_service(layout, "server", _sleeper(), user="llmgw").endswith("unchanged")
    layout.unit("mirror").write_text("[Service]\nExecStart=/bin/true\n")
    with pytest.raises(ServiceError, match="not written by llmgw"):
        install_service(layout, "mirror", _sleeper())
    assert layout.unit("mirror").read_text() == "[Service]\nExecStart=/bin/true\n"
    assert "left alone" in remove_service(layout, "mirror")
    assert layout.unit("mirror").exists()


def test_without_systemd_the_unit_command_starts_directly_and_stops(tmp_path):
    layout = Layout(tmp_path)
    install_service(layout, "server", [*_sleeper(), "with space", "100%"], user=None)
    assert unit_argv(layout.unit("server").read_text())[-2:] == ["with space", "100%"]
    said = start_service(layout, "server")
    assert "started directly" in said and "no systemd here" in said
    assert str(layout.pid_file("server")) in said and str(layout.log_file("server")) in said
    try:
        assert service_running(layout, "server")
        assert "already running" in start_service(layout, "server")
    finally:
        said = stop_service(layout, "server")
    assert said.startswith("llmgw server: stopped")
    deadline = time.monotonic() + 5
    while service_running(layout, "server") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not service_running(layout, "server")
    assert not layout.pid_file("server").exists()
    assert stop_service(layout, "server") == "llmgw server: not running"
    assert remove_service(layout, "server").endswith("removed")
    assert not layout.unit("server").exists()


def test_a_role_that_is_not_installed_cannot_start(tmp_path):
    with pytest.raises(ServiceError, match="does not exist"):
        start_service(Layout(tmp_path), "agent")
