"""Do → Upgrade the cluster and Do → Replicate the store in a real terminal (tmux), as an operator goes through
them: `python -m llmgw console` in a tmux session of its own, typed into with send-keys, read with capture-pane.

Upgrade: against a real leading control plane with scripted agents and a mirror holding a release signed with a
key server.yaml trusts and one signed by a stranger (upgrade_cluster.py). Replicate: the console started in a
scratch folder (its default output folder is there), compared with what `llmgw server init --patroni` writes.

Slow: it starts the console as a process and waits on a real terminal.
"""

from __future__ import annotations

import shlex
import stat
import sys
import time
from pathlib import Path

import pytest
from test_tmux import ROOT, tmux  # noqa: F401 - the fixture
from upgrade_cluster import NEW, OLD, STRANGER, UpgradeCluster

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.cli.main import main
from llmgw.pki import init_ca

pytestmark = pytest.mark.slow

MEMBERS = "db1=10.0.0.149,db2=10.0.0.150"
ETCD = "db1=10.0.0.149,db2=10.0.0.150,ctl=10.0.0.140"


def start_console(tmux, tmp_path: Path, live: LiveAdmin, *, cwd: Path = ROOT) -> None:  # noqa: F811
    token = tmp_path / "admin-token"
    token.write_text(live.TOKEN)
    command = (f"cd {shlex.quote(str(cwd))} && {shlex.quote(sys.executable)} -m llmgw console --admin {live.url} "
               f"--token-file {shlex.quote(str(token))} --actor tmux 2>{shlex.quote(str(tmp_path / 'stderr'))}; "
               "sleep 60")
    tmux.start(command, width=120, height=45)
    tmux.wait_for("Watch")


def open_entry(tmux, words: str) -> str:  # noqa: F811
    """Down the sidebar until the panel shows `words`, then into the panel."""
    for _ in range(40):
        if words in tmux.text():
            break
        tmux.keys("Down")
    shown = tmux.wait_for(words)
    tmux.keys("Right")
    return shown


def clear_field(tmux, chars: int = 200) -> None:  # noqa: F811
    tmux("send-keys", "-t", tmux.session, "End")
    tmux("send-keys", "-t", tmux.session, "-N", str(chars), "BSpace")
    time.sleep(0.3)


def joined(shown: str) -> str:
    """The screen's dialog lines joined, their spaces made one (a long line wraps inside the dialog)."""
    return " ".join(" ".join(line.split("│")[1].split()) for line in shown.splitlines() if line.count("│") >= 2)


def test_upgrade_the_cluster_from_the_console_starts_the_job_with_the_options_chosen_and_follows_it(tmp_path,
                                                                                                   tmux):  # noqa: F811
    with UpgradeCluster(tmp_path) as cluster:
        start_console(tmux, tmp_path, cluster.live)
        shown = open_entry(tmux, "Releases in the mirror")
        tmux.wait_for(f"{STRANGER}        does not verify")
        assert f"{NEW}        verifies: signed by trusted key" in tmux.text()

        tmux.keys("Enter")
        tmux.wait_for(f"Upgrade to {STRANGER} (does not verify)")
        tmux.keys("Enter")  # the first: the release that verifies
        tmux.wait_for(f"Upgrade the cluster to {NEW}")
        tmux.keys("Right", "Tab", "Right", "Tab", "Tab", "Enter")  # by rack; roll back; timeout as it is; Upgrade
        shown = tmux.wait_for("Are you sure?")
        assert "one rack at a time: rack r1: node-a; rack r2: node-b" in joined(shown)
        tmux.keys("y")
        shown = tmux.wait_for("Done:", timeout=30)
        [job] = cluster.upgrade_jobs()
        assert job["state"] == "done" and f"Job {job['id']}: upgrade cluster to {NEW}" in shown
        assert cluster.versions() == {"node-a": NEW, "node-b": NEW}
        [event] = cluster.audited("cluster.upgrade")
        fields = event.detail["fields"]
        assert event.actor == "tmux" and (fields["release"], fields["by"], fields["rollback"]) == (NEW, "rack", True)

        # The stranger's release: refused in the control plane's words, nothing started.
        tmux.keys("Enter")  # closes the job
        tmux.wait_for("The last upgrade")
        tmux.keys("Enter")
        tmux.wait_for(f"Upgrade to {STRANGER} (does not verify)")
        tmux.keys("Down", "Enter")
        tmux.wait_for(f"Upgrade the cluster to {STRANGER}")
        tmux.keys("Tab", "Tab", "Tab", "Enter", "y")
        shown = tmux.wait_for("Refused")
        words = joined(shown)
        assert f"release {STRANGER}: refused: signed by key" in words and "not trusted here" in words
        assert len(cluster.upgrade_jobs()) == 1 and OLD not in cluster.versions().values()


def tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in sorted(folder.rglob("*"))}


def test_replicate_the_store_refuses_a_bad_member_under_its_field_then_writes_what_server_init_writes(tmp_path,
                                                                                                    tmux):  # noqa: F811
    init_ca(tmp_path / "ca")
    bins = tmp_path / "pg" / "16" / "bin"
    bins.mkdir(parents=True)
    for name in ("initdb", "pg_ctl", "psql"):
        (bins / name).write_text("")
    here = tmp_path / "here"
    here.mkdir()
    out = here / "llmgw-patroni"  # the form's default: beside where the console was started
    with LiveAdmin(tmp_path, cluster=FakeCluster(nodes=[gpu_node("gpu-a-01")])) as live:
        start_console(tmux, tmp_path, live, cwd=here)
        open_entry(tmux, "PostgreSQL under Patroni on two or more machines")
        tmux.keys("Enter")
        tmux.wait_for("NAME=HOST[:PG_PORT[:API_PORT]], comma-separated, two or more")

        # One member only: said under Members; nothing written.
        tmux.keys("db1=10.0.0.149", literal=True)
        tmux.keys("Tab", "Tab", "Tab")  # etcd: one on each member; Write into: its default; the CA
        clear_field(tmux)
        tmux.keys(str(tmp_path / "ca"), literal=True)
        tmux.keys("Tab", "Tab")  # the CA for clients: its default
        clear_field(tmux)
        tmux.keys(str(bins), literal=True)
        tmux.keys("Tab", "Tab", "Enter")  # clients: every member; Write
        shown = tmux.wait_for("--members: give two or more PostgreSQL members")
        assert not out.exists()
        lines = shown.splitlines()
        members = next(i for i, line in enumerate(lines) if "Members" in line and "db1=10.0.0.149" in line)
        assert "--members: give two or more" in lines[members + 1]  # under its field

        # Put right: the same files as the command writes, and what to run where.
        tmux.keys("Tab", "Tab")  # past Cancel, round to Members
        clear_field(tmux, 40)
        tmux.keys(MEMBERS, literal=True)
        tmux.keys("Tab")
        tmux.keys(ETCD, literal=True)
        tmux.keys(*["Tab"] * 6, "Enter")
        shown = tmux.wait_for("The store's files are written")
        words = joined(shown)
        assert "copy it there and run `sudo sh install.sh` in it" in words
        assert "the store's address, every member in it (0600)" in words and "llmgw:***@" in words
    assert main(["server", "init", "--patroni", "--members", MEMBERS, "--etcd", ETCD, "--out",
                 str(tmp_path / "cli"), "--ca", str(tmp_path / "ca"), "--pg-bin", str(bins)]) == 0
    assert tree(out) == tree(tmp_path / "cli")
    for rel in ("db1/patroni/patroni.yml", "db2/install.sh", "ctl/install.sh", "ctl/llmgw-etcd.service"):
        assert (out / rel).read_text() == (tmp_path / "cli" / rel).read_text(), rel
