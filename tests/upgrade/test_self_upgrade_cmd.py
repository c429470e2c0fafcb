"""`llmgw self-upgrade`: a control plane's machine takes a signed release from the mirror the way an agent does."""

from __future__ import annotations

import asyncio
import sys

import pytest
from aiohttp import web
from upgrade_helpers import make_key, release_folder, tiny_zipapp

from llmgw.agent.self_upgrade import zipapp_version
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.release.store import add_release


@pytest.fixture
async def site(tmp_path):
    """A mirror holding release 1.1.0 (by the site's key) and 6.6.6 (by a stranger's), a server.yaml naming the
    site's key by a path relative to it, and the machine's program, llmgw 1.0.0."""
    private, trust, public = make_key(tmp_path / "etc" / "keys")
    stranger, stranger_trust, _ = make_key(tmp_path / "stranger")
    root = tmp_path / "mirror"
    root.mkdir()
    add_release(root, release_folder(tmp_path / "rel", "1.1.0", private), trust)
    add_release(root, release_folder(tmp_path / "bad", "6.6.6", stranger), stranger_trust)
    runner = web.AppRunner(build_file_app(Layout(root)))
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    url = f"http://127.0.0.1:{server._server.sockets[0].getsockname()[1]}"
    (tmp_path / "etc" / "server.yaml").write_text(f'mirror:\n  url: "{url}"\nreleases:\n'
                                                  '  trusted_keys: ["keys/llmgw-release.pub"]\n')
    program = tiny_zipapp(tmp_path / "lib" / "llmgw.pyz", "1.0.0")
    yield tmp_path / "etc" / "server.yaml", program
    await runner.cleanup()


async def llmgw(*argv) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "llmgw", *map(str, argv),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode()


@pytest.mark.slow  # two llmgw processes
async def test_self_upgrade_puts_a_signed_release_in_place_and_back_puts_the_one_before_back(site):
    config, program = site
    before = program.read_bytes()
    code, out = await llmgw("self-upgrade", "1.1.0", "--config", config, "--program", program)
    assert code == 0, out
    assert f"llmgw 1.1.0 is in place at {program}" in out and "systemctl restart llmgw-server" in out
    assert zipapp_version(program) == "1.1.0" and program.with_name("llmgw.pyz.previous").read_bytes() == before
    code, out = await llmgw("self-upgrade", "--back", "--program", program)
    assert code == 0, out
    assert program.read_bytes() == before and zipapp_version(program.with_name("llmgw.pyz.previous")) == "1.1.0"


@pytest.mark.slow  # an llmgw process
async def test_self_upgrade_refuses_a_release_signed_by_a_key_the_site_does_not_trust(site):
    config, program = site
    before = sorted(p.name for p in program.parent.iterdir()), program.read_bytes()
    code, out = await llmgw("self-upgrade", "6.6.6", "--config", config, "--program", program)
    assert code == 1
    assert "not upgraded: release 6.6.6: refused: signed by key" in out and "which is not trusted here" in out
    assert (sorted(p.name for p in program.parent.iterdir()), program.read_bytes()) == before
