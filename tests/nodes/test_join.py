"""Join codes and `llmgw join`: single use, expiry, forged and foreign codes refused with nothing written."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import stat

import pytest
from cryptography import x509

from llmgw import pki
from llmgw.control.join_codes import JoinCodeError, parse_code
from llmgw.nodes.join import JoinError
from llmgw.pki.csr import make_node_request
from tests.nodes.conftest import Plane, files_under, join_in_thread


async def test_a_code_names_the_control_plane_and_the_ca_and_no_secret_is_stored(plane, store):
    code = parse_code(await plane.code(name="gpu01"))
    assert code.addresses == (plane.address,)
    assert code.ca_sha256 == plane.ca_sha256.replace(":", "").lower()
    assert code.name == "gpu01" and code.expires_at > dt.datetime.now(dt.timezone.utc)
    stored = (await store.get_setting(f"join.codes.{code.id}")).value
    assert code.secret not in str(stored) and len(stored["secret_sha256"]) == 64
    listed = await plane.codes.live()
    assert [c["id"] for c in listed] == [code.id] and "secret" not in str(listed)


async def test_a_code_works_once_and_its_use_is_audited(plane, store, tmp_path):
    text = await plane.code()
    code = parse_code(text)
    cert = await plane.codes.use(code.id, code.secret, node="gpu01", peer="127.0.0.1")
    assert cert["created_by"] == "admin@example.com"
    # Used: a second use is refused, naming who used it.
    with pytest.raises(JoinCodeError, match="already used, by node 'gpu01'"):
        await plane.codes.use(code.id, code.secret, node="gpu02", peer="127.0.0.1")
    assert await plane.codes.live() == []
    events = [(e.action, e.target) for e in await store.list_audit()]
    assert ("nodes.join", f"join-code:{code.id}") in events


async def test_issuance_takes_only_the_key_from_the_request(plane):
    from llmgw.pki.csr import issue_from_request

    request = make_node_request("gpu01")
    cert_pem, ca_pem = issue_from_request(plane.ca_dir, request.csr_pem, "gpu01")
    cert = x509.load_pem_x509_certificate(cert_pem)
    info = pki.describe(cert)
    assert info["common_name"] == "gpu01" and info["usages"] == ["client"]
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(request.key_pem, None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    assert b"PRIVATE KEY" not in request.csr_pem


async def test_join_writes_the_node_s_files_with_its_key_made_here(plane, tmp_path, monkeypatch):
    # The agent's start is B1's service code; here the agent "registers" as soon as it is started.
    import llmgw.nodes.join as j

    started = []

    def fake_install(layout, manifest):
        started.append(layout)
        (layout.state / "registered.json").write_text('{"control_plane": "wss://%s/agent/v1"}' % plane.address)
        return "agent started"

    monkeypatch.setattr(j, "_install_agent", fake_install)
    root = tmp_path / "node"
    result = await join_in_thread(await plane.code(), root, name="gpu07")
    assert result.node == "gpu07" and plane.address in result.control_plane
    tls = root / "etc/llmgw/tls"
    assert stat.S_IMODE(os.stat(tls / "node-key.pem").st_mode) == 0o600
    cert = pki.describe(pki.load_certificate(tls / "node.pem"))
    assert cert["common_name"] == "gpu07"
    assert (tls / "ca.pem").read_bytes() == (plane.ca_dir / "ca.pem").read_bytes()
    from llmgw.config.load import load_agent_config

    config = load_agent_config(str(root / "etc/llmgw/agent.yaml"))
    assert config.node_id == "gpu07" and config.control_planes == [plane.address]
    assert config.tls.key == str(tls / "node-key.pem")


async def test_a_reused_code_is_refused_and_writes_nothing(plane, tmp_path, monkeypatch):
    import llmgw.nodes.join as j

    monkeypatch.setattr(j, "_install_agent",
                        lambda layout, manifest: (layout.state / "registered.json").write_text("{}") or "")
    text = await plane.code()
    await join_in_thread(text, tmp_path / "first", name="n1")
    with pytest.raises(JoinError, match="already used, by node 'n1'"):
        await join_in_thread(text, tmp_path / "second", name="n2")
    assert files_under(tmp_path / "second") == []


async def test_an_expired_code_is_refused_and_writes_nothing(plane, tmp_path):
    text = await plane.code(ttl=dt.timedelta(minutes=1))
    later = lambda: dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=2)  # noqa: E731
    with pytest.raises(JoinError, match="expired"):
        await join_in_thread(text, tmp_path / "node", now=later)
    # And the control plane refuses it too, whatever the machine's clock says.
    plane.codes.clock = later
    with pytest.raises(JoinCodeError, match="expired"):
        code = parse_code(text)
        await plane.codes.use(code.id, code.secret, node="n1", peer="x")
    assert files_under(tmp_path / "node") == []


async def test_a_forged_secret_is_refused_and_writes_nothing(plane, tmp_path):
    code = parse_code(await plane.code())
    forged = type(code)(id=code.id, secret="not-the-secret", ca_sha256=code.ca_sha256, addresses=code.addresses,
                        expires_at=code.expires_at)
    with pytest.raises(JoinError, match="secret is wrong"):
        await join_in_thread(forged.text(), tmp_path / "node", name="n1")
    assert files_under(tmp_path / "node") == []
    # The real one still works afterwards: a forged try does not burn it.
    assert [c["id"] for c in await plane.codes.live()] == [code.id]


async def test_a_code_for_another_ca_is_refused_before_anything_is_sent(plane, tmp_path, store):
    other = Plane(tmp_path, store, "cluster-b")
    text = await plane.code(ca_sha256=other.ca_sha256)
    with pytest.raises(JoinError, match="another cluster"):
        await join_in_thread(text, tmp_path / "node", name="n1")
    assert files_under(tmp_path / "node") == []
    assert len(await plane.codes.live()) == 1  # never offered to the control plane


async def test_a_damaged_code_and_a_name_in_use_are_refused_in_words(plane, tmp_path):
    with pytest.raises(JoinError, match="not a join code"):
        await join_in_thread("hello", tmp_path / "node")
    text = await plane.code()
    with pytest.raises(JoinError, match="damaged"):
        await join_in_thread(text[:-10], tmp_path / "node")
    plane.connected.add("busy")
    with pytest.raises(JoinError, match="a node called 'busy' is connected now"):
        await join_in_thread(text, tmp_path / "node", name="busy")
    with pytest.raises(JoinError, match="for node 'gpu01'"):
        await join_in_thread(await plane.code(name="gpu01"), tmp_path / "node", name="other")
    assert files_under(tmp_path / "node") == []


async def test_join_lists_what_it_writes_and_wipe_removes_exactly_that(plane, tmp_path, monkeypatch):
    # The real unit is written; only starting the agent is replaced: it "registers" at once.
    import llmgw.install.service as service
    from llmgw.install.layout import Layout
    from llmgw.install.manifest import Manifest
    from llmgw.install.wipe import carry_out, plan_wipe

    def registered(layout, role):
        (layout.state / "registered.json").write_text('{"control_plane": "%s"}' % plane.address)
        return "llmgw agent: started"

    monkeypatch.setattr(service, "start_service", registered)
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)  # there before llmgw: wipe leaves it
    (root / "etc/hostname").write_text("gpu07\n")
    await join_in_thread(await plane.code(), root, name="gpu07")
    layout = Layout(root)
    manifest = Manifest.load(layout)
    assert str(root / "etc/llmgw") in manifest.dirs and str(root / "var/lib/llmgw") in manifest.dirs
    assert manifest.units == ["agent"] and str(layout.unit("agent")) in manifest.files
    assert (layout.unit("agent")).read_text().startswith(service.MARKER)

    plan = plan_wipe(layout)
    assert plan.leaving is not None and plan.leaving.node == "gpu07"
    assert plan.lines()[0].startswith("node gpu07 from the cluster")
    said = await asyncio.to_thread(carry_out, plan)
    # The test plane serves no leave route: wipe goes on and says how to remove the node by hand.
    assert "llmgw ctl node remove gpu07" in said[0]
    assert files_under(root) == ["etc", "etc/hostname"]
