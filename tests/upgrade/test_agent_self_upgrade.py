"""The agent's program replaced by a signed release from the mirror's file server, or refused with nothing changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiohttp import web
from upgrade_helpers import make_key, release_folder, stored_release, tiny_zipapp

from llmgw.agent.self_upgrade import UpgradeRefused, put_back_previous, replace_program, zipapp_version
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.release.checksums import SIG


@pytest.fixture
async def mirror(tmp_path):
    """A mirror folder served by the mirror's own file server; yields (folder, its URL)."""
    root = tmp_path / "mirror"
    root.mkdir()
    runner = web.AppRunner(build_file_app(Layout(root)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield root, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def node(tmp_path):
    """The node's program: llmgw 1.0.0 at bin/llmgw.pyz."""
    return tiny_zipapp(tmp_path / "node" / "llmgw.pyz", "1.0.0")


@pytest.fixture
def signer(tmp_path):
    return make_key(tmp_path / "keys")


async def test_a_signed_release_replaces_the_program_and_keeps_the_one_before(mirror, node, signer, tmp_path):
    root, url = mirror
    private, trust, _ = signer
    stored_release(root, release_folder(tmp_path / "rel", "1.1.0", private), trust)
    before = node.read_bytes()
    done = await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="x86_64")
    assert zipapp_version(node) == "1.1.0" and done.version == "1.1.0"
    assert done.previous == node.with_name("llmgw.pyz.previous") and done.previous.read_bytes() == before
    assert os.access(node, os.X_OK)
    assert sorted(p.name for p in node.parent.iterdir()) == ["llmgw.pyz", "llmgw.pyz.previous"]  # no partials left
    back = put_back_previous(node)
    assert back.version == "1.0.0" and node.read_bytes() == before and zipapp_version(done.previous) == "1.1.0"


async def test_a_release_signed_by_an_unknown_key_is_refused_and_nothing_changes(mirror, node, signer, tmp_path):
    root, url = mirror
    private, trust, _ = signer
    stranger, stranger_trust, _ = make_key(tmp_path / "other-keys")
    stored_release(root, release_folder(tmp_path / "rel", "1.1.0", stranger), stranger_trust)
    before = sorted((p.name, p.read_bytes()) for p in node.parent.iterdir())
    with pytest.raises(UpgradeRefused, match="which is not trusted here"):
        await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="x86_64")
    assert sorted((p.name, p.read_bytes()) for p in node.parent.iterdir()) == before


async def test_a_revoked_key_an_unsigned_release_and_a_changed_zipapp_are_each_refused(mirror, node, signer, tmp_path):
    root, url = mirror
    private, trust, _ = signer
    stored = stored_release(root, release_folder(tmp_path / "rel", "1.1.0", private), trust)
    before = node.read_bytes()
    kid = next(iter(trust.keys))
    revoked = type(trust)(keys=dict(trust.keys))
    revoked.revoke(kid, "releases.revoked_keys[0]")
    with pytest.raises(UpgradeRefused, match="which is revoked"):
        await replace_program(node, version="1.1.0", mirror=url, trust=revoked, machine="x86_64")
    zipapp = stored / "llmgw-1.1.0-linux-x86_64.pyz"
    zipapp.write_bytes(zipapp.read_bytes() + b"\0")  # damaged in the mirror after it was added
    with pytest.raises(UpgradeRefused, match="not the .* the signed SHA256SUMS lists"):
        await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="x86_64")
    (stored / SIG).unlink()
    with pytest.raises(UpgradeRefused, match="unsigned: SHA256SUMS.sig is missing"):
        await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="x86_64")
    assert node.read_bytes() == before and sorted(p.name for p in node.parent.iterdir()) == ["llmgw.pyz"]


async def test_a_zipapp_that_is_not_the_version_asked_for_is_refused(mirror, node, signer, tmp_path):
    root, url = mirror
    private, trust, _ = signer
    wrong = tiny_zipapp(tmp_path / "wrong.pyz", "0.9.0")  # signed and listed, but it is another version inside
    stored_release(root, release_folder(tmp_path / "rel", "1.1.0", private, zipapps={"x86_64": wrong}), trust)
    with pytest.raises(UpgradeRefused, match="says it is llmgw 0.9.0, not 1.1.0"):
        await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="x86_64")
    assert zipapp_version(node) == "1.0.0"


async def test_a_release_the_mirror_lacks_or_without_this_machines_zipapp_is_refused(mirror, node, signer, tmp_path):
    root, url = mirror
    private, trust, _ = signer
    with pytest.raises(UpgradeRefused, match="the mirror holds no release 2.0.0.*mirror release add"):
        await replace_program(node, version="2.0.0", mirror=url, trust=trust, machine="x86_64")
    stored_release(root, release_folder(tmp_path / "rel", "1.1.0", private), trust)
    with pytest.raises(UpgradeRefused, match=r"no zipapp for this machine \(riscv64\)"):
        await replace_program(node, version="1.1.0", mirror=url, trust=trust, machine="riscv64")
    assert zipapp_version(node) == "1.0.0"


def test_going_back_without_a_previous_file_is_refused(node):
    with pytest.raises(UpgradeRefused, match="nothing to go back to"):
        put_back_previous(node)
    assert zipapp_version(node) == "1.0.0"
