"""`llmgw ctl` run in the test's own process against a live admin API (llmgw.admin.testing.LiveAdmin); any
other `llmgw` command run in it too.

    with ctl_against(tmp_path, monkeypatch, cluster=FakeCluster(...)) as live:
        out = ok(capsys, "nodes")

`ctl_against` starts the LiveAdmin (its keyword arguments as LiveAdmin's)
and sets LLMGW_ADMIN_URL and LLMGW_ADMIN_TOKEN to it, as an operator's
shell would; `ctl` runs one command and returns (exit code, stdout, stderr);
`ok`, `ok_json` and `refused` assert how it ended. `run`, `run_ok` and
`run_refused` do the same for `llmgw ARGV` without the `ctl`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from llmgw.admin.testing import LiveAdmin
from llmgw.cli.main import main


@contextlib.contextmanager
def ctl_against(tmp_path: Path, monkeypatch, **live_options) -> Iterator[LiveAdmin]:
    with LiveAdmin(tmp_path, **live_options) as server:
        monkeypatch.setenv("LLMGW_ADMIN_URL", server.url)
        monkeypatch.setenv("LLMGW_ADMIN_TOKEN", server.TOKEN)
        yield server


def server_yaml_with_ca(tmp_path: Path, host: str = "cp-test") -> Path:
    """tmp_path/server.yaml naming a real cluster CA (made in tmp_path/ca) and this host's certificate for
    127.0.0.1, as join codes need (they carry the CA's fingerprint)."""
    from llmgw import pki

    pki.init_ca(tmp_path / "ca")
    pki.issue_server(tmp_path / "ca", host, ["127.0.0.1"], tmp_path / "tls")
    path = tmp_path / "server.yaml"
    path.write_text(
        "agent_tls:\n"
        f"  cert: {tmp_path}/tls/server.pem\n  key: {tmp_path}/tls/server-key.pem\n  ca: {tmp_path}/tls/ca.pem\n")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """`llmgw ARGV` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_ok(capsys, *argv: str) -> str:
    """Its stdout; exit 0 asserted."""
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def run_refused(capsys, *argv: str) -> str:
    """The one line said on stderr (log lines aside); exit 2 asserted."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if "level=" not in line]
    assert len(lines) == 1, err
    return lines[0]


def ctl(capsys, *argv: str) -> tuple[int, str, str]:
    return run(capsys, "ctl", *argv)


def ok(capsys, *argv: str) -> str:
    return run_ok(capsys, "ctl", *argv)


def ok_json(capsys, *argv: str):
    return json.loads(ok(capsys, *argv, "--json"))


def refused(capsys, *argv: str) -> str:
    return run_refused(capsys, "ctl", *argv)
