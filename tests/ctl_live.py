"""`llmgw ctl` run in the test's own process against a live admin API (llmgw.admin.testing.LiveAdmin).

    with ctl_against(tmp_path, monkeypatch, cluster=FakeCluster(...)) as live:
        out = ok(capsys, "nodes")

`ctl_against` starts the LiveAdmin (its keyword arguments as LiveAdmin's)
and sets LLMGW_ADMIN_URL and LLMGW_ADMIN_TOKEN to it, as an operator's
shell would; `ctl` runs one command and returns (exit code, stdout, stderr);
`ok`, `ok_json` and `refused` assert how it ended.
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


def ctl(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ctl", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *argv: str) -> str:
    """Its stdout; exit 0 asserted."""
    code, out, err = ctl(capsys, *argv)
    assert code == 0, err
    return out


def ok_json(capsys, *argv: str):
    return json.loads(ok(capsys, *argv, "--json"))


def refused(capsys, *argv: str) -> str:
    """The one line said on stderr; exit 2 asserted."""
    code, out, err = ctl(capsys, *argv)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if "level=" not in line]
    assert len(lines) == 1, err
    return lines[0]
