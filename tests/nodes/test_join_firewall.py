"""`llmgw join`'s firewall table: the engines' ports open to the control planes only, listed for wipe,
shown by --dry-run (which writes nothing and leaves the code usable), left out with --no-firewall."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from llmgw.control.join_codes import parse_code
from llmgw.install import firewall
from llmgw.install.layout import Layout
from llmgw.install.manifest import Manifest
from llmgw.nodes.join import join
from tests.nodes.conftest import files_under, join_in_thread

ENGINES = "tcp dport 20000-20999"


@pytest.fixture
def agent_registers(monkeypatch):
    """Starting the agent is replaced: it "registers" at once (the unit itself is still written)."""
    import llmgw.install.service as service

    def registered(layout, role):
        (layout.state / "registered.json").write_text('{"control_plane": "cp"}')
        return "llmgw agent: started"

    monkeypatch.setattr(service, "start_service", registered)


@pytest.fixture
def two_planes(plane):
    """The join answer names a second control plane, as https://…, and one on IPv6."""
    async def planes() -> list[str]:
        return [plane.address, "https://10.0.0.141:7443", "[fd00::5]:7443"]

    plane.endpoint.control_planes = planes
    return plane


def nft_check(path) -> None:
    if shutil.which("nft") is None:
        return
    try:
        firewall.check_ruleset(path)
    except firewall.FirewallError as exc:
        if "Operation not permitted" not in str(exc):
            raise


async def test_join_writes_a_table_opening_the_engine_ports_to_the_control_planes_only(
        two_planes, tmp_path, agent_registers):
    root = tmp_path / "node"
    said: list[str] = []
    await asyncio.to_thread(join, await two_planes.code(), root=root, name="gpu07", say=said.append)
    layout = Layout(root)
    text = layout.nft.read_text()
    assert text.startswith(firewall.HEADER) and "# the node gpu07" in text
    assert f"{ENGINES} ip saddr {{ 127.0.0.1/32, 10.0.0.141/32 }} accept" in text
    assert f"{ENGINES} ip6 saddr {{ fd00::5/128 }} accept" in text
    assert f'{ENGINES} drop comment "engines (the control planes\' routers only): closed to everyone else"' in text
    assert text.count("dport") == 3  # nothing else of the machine's is touched
    assert f"firewall: not applied: --root {root} is not this machine's firewall (the file is written)" in said
    nft_check(layout.nft)
    manifest = Manifest.load(layout)
    assert str(layout.nft) in manifest.files and manifest.firewall is False


async def test_wipe_removes_the_table_s_file(plane, tmp_path, agent_registers):
    from llmgw.install.wipe import carry_out, plan_wipe

    root = tmp_path / "node"
    await join_in_thread(await plane.code(), root, name="gpu07")
    layout = Layout(root)
    assert layout.nft.exists()
    plan = plan_wipe(layout)
    assert layout.nft in plan.files
    await asyncio.to_thread(carry_out, plan)
    assert not layout.nft.exists() and files_under(root) == []


async def test_no_firewall_writes_no_table(plane, tmp_path, agent_registers):
    root = tmp_path / "node"
    said: list[str] = []
    await asyncio.to_thread(join, await plane.code(), root=root, name="gpu07", say=said.append, firewall=False)
    assert "firewall: left alone (--no-firewall)" in said
    assert not Layout(root).nft.exists() and (root / "etc/llmgw/agent.yaml").exists()


async def test_a_control_plane_s_own_table_is_kept(plane, tmp_path, agent_registers):
    root = tmp_path / "both"
    layout = Layout(root)
    layout.etc.mkdir(parents=True)
    layout.server_yaml.write_text("listen: :8080\n")
    layout.nft.parent.mkdir(parents=True)
    layout.nft.write_text(firewall.HEADER + "\n# the control plane on cp1\n")
    said: list[str] = []
    await asyncio.to_thread(join, await plane.code(), root=root, name="gpu07", say=said.append)
    assert layout.nft.read_text() == firewall.HEADER + "\n# the control plane on cp1\n"
    assert any("kept (this machine is a control plane" in line for line in said)


async def llmgw(capsys, *args: str) -> tuple[int, str, str]:
    """The llmgw command line, in this process (in a thread: the control plane runs on this loop)."""
    from llmgw.cli.main import main

    capsys.readouterr()
    rc = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return rc, out, err


async def test_dry_run_prints_the_files_and_rules_writes_nothing_and_leaves_the_code_usable(
        plane, tmp_path, agent_registers, capsys):
    code = await plane.code()
    root = tmp_path / "node"
    rc, out, err = await llmgw(capsys, "join", "--dry-run", code, "--root", str(root), "--name", "gpu07")
    assert rc == 0, err
    layout = Layout(root)
    assert f"== {layout.agent_yaml}" in out and 'node_id: "gpu07"' in out
    assert f"== {layout.unit('agent')}" in out
    assert f"== {layout.nft}" in out and f"{ENGINES} ip saddr {{ 127.0.0.1/32 }} accept" in out
    assert "not applied: --root" in out and "the code is not sent: it still works" in out
    assert files_under(root) == []
    assert len(await plane.codes.live()) == 1
    # The code still joins the machine afterwards.
    await join_in_thread(code, root, name="gpu07")
    assert layout.nft.exists()


async def test_dry_run_without_firewall_and_with_a_foreign_ca(plane, tmp_path, store, capsys):
    from tests.nodes.conftest import Plane

    root = tmp_path / "node"
    rc, out, err = await llmgw(capsys, "join", "--dry-run", "--no-firewall", await plane.code(), "--root", str(root))
    assert rc == 0, err
    assert "firewall: left alone (--no-firewall)" in out and "dport" not in out
    other = Plane(tmp_path, store, "cluster-b")
    rc, out, err = await llmgw(capsys, "join", "--dry-run", await plane.code(ca_sha256=other.ca_sha256), "--root", str(root))
    assert rc == 1 and "another cluster" in err
    assert files_under(root) == []


@pytest.mark.slow
async def test_the_node_s_table_applies_in_a_namespace_of_its_own(two_planes, tmp_path, agent_registers):
    if shutil.which("nft") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root, nft and ip (apt-get install nftables iproute2)")
    root = tmp_path / "node"
    await join_in_thread(await two_planes.code(), root, name="gpu07")
    ns = f"llmgw-test-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"ip netns add is not allowed here: {made.stderr.strip()}")
    try:
        firewall.apply_ruleset(Layout(root).nft, netns=ns)
        listed = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "table", "inet", "llmgw"],
                                capture_output=True, text=True, check=True).stdout
        assert "10.0.0.141" in listed and "fd00::5" in listed and listed.count(f"{ENGINES} drop") == 1
        assert firewall.remove_table(netns=ns) is True and firewall.table_applied(netns=ns) is False
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


@pytest.mark.slow  # runs llmgw as a process: about 2 s
async def test_node_add_dry_run_checks_the_machine_shows_join_s_dry_run_and_revokes_its_code(
        plane, tmp_path, monkeypatch):
    """ssh is a stand-in that runs the command here (the machine is this one); the copied file runs this checkout."""
    import llmgw.nodes.ssh_add as ssh_add

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text('#!/bin/sh\nfor last; do :; done\nexec /bin/sh -c "$last"\n')
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    shim = tmp_path / "llmgw.pyz"  # whichever Python the probe finds runs it; it hands over to this one
    shim.write_text(f"import os, sys\nos.execv({sys.executable!r}, [{sys.executable!r}, '-m', 'llmgw', *sys.argv[1:]])\n")
    monkeypatch.setattr(ssh_add, "pyz_to_copy", lambda say: shim)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    loop = asyncio.get_running_loop()

    def on_plane(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    def make_code(name: str) -> dict:
        text = on_plane(plane.code(name=name))
        return {"id": parse_code(text).id, "code": text}

    root = tmp_path / "node"
    said: list[str] = []
    answer = await asyncio.to_thread(
        ssh_add.add_node, "root@localhost", name="gpu07", root=str(root), say=said.append, dry_run=True,
        make_code=make_code, get_node=lambda name: None,
        revoke_code=lambda code_id: on_plane(plane.codes.revoke(code_id, actor="admin@example.com")))
    text = "\n".join(said)
    assert answer == {} and "running llmgw join --dry-run on localhost" in text
    assert f"{ENGINES} ip saddr {{ 127.0.0.1/32 }} accept" in text and "the code is not sent" in text
    assert files_under(root) == [] and await plane.codes.live() == []
    assert "revoked: a dry run joins nothing" in said[-1]


def test_control_plane_addresses_become_ip_addresses():
    from llmgw.nodes.node_firewall import plane_networks

    found = plane_networks(["localhost:7443", "https://10.0.0.1:7443/agent/v1", "[fd00::5]:7443", "10.0.0.1:7443"])
    assert "127.0.0.1" in found and found.index("10.0.0.1") < found.index("fd00::5")
    assert found.count("10.0.0.1") == 1


WIPE_IN_A_MACHINE_OF_ITS_OWN = r"""
import os, subprocess, sys
scratch = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "llmgw-test", scratch], check=True)
for n, top in enumerate(["/etc", "/var", "/usr/local"]):  # what is written there lands in the tmpfs
    upper, work = f"{scratch}/{n}/upper", f"{scratch}/{n}/work"
    os.makedirs(upper), os.makedirs(work)
    subprocess.run(["mount", "-t", "overlay", "llmgw-test", "-o", f"lowerdir={top},upperdir={upper},workdir={work}",
                    top], check=True)
    if not os.path.ismount(top):
        sys.exit(f"{top} is not an overlay of its own: stopped before writing anything")
from llmgw.install.layout import Layout
layout = Layout("/")
from llmgw.install import firewall
from llmgw.install.manifest import Manifest
from llmgw.install.wipe import carry_out, plan_wipe
from llmgw.nodes.node_firewall import install_node_firewall, node_ruleset
manifest = Manifest.load(layout)
said = []
install_node_firewall(layout, manifest, node_ruleset(["10.0.0.140"], "gpu07"), said.append)
print(said)
assert "firewall: table inet llmgw applied (nft -f)" in said and Manifest.load(layout).firewall
assert firewall.table_applied()
plan = plan_wipe(layout)
assert plan.table and layout.nft in plan.files
print(carry_out(plan))
assert not firewall.table_applied() and not layout.nft.exists()
print("wiped")
"""


@pytest.mark.slow
def test_a_table_join_applied_on_the_machine_itself_is_deleted_by_wipe(tmp_path):
    """The machine itself is a mount and network namespace of its own: /etc, /var and /usr/local overlaid by a
    tmpfs, nftables of its own; the host's files and rules are never touched."""
    if shutil.which("nft") is None or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root, nft and unshare (apt-get install nftables util-linux)")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private", sys.executable, "-c",
                           WIPE_IN_A_MACHINE_OF_ITS_OWN, str(scratch)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"unshare is not allowed here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "firewall: table inet llmgw deleted" in done.stdout and done.stdout.rstrip().endswith("wiped")
