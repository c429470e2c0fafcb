"""POST/GET/DELETE /nodes/join-codes: codes a machine joins with, listed without secrets, audited."""

from __future__ import annotations

import attrs

from llmgw import pki
from llmgw.config.server import ServerConfig, ServerTLS
from llmgw.control.join_codes import parse_code


def config_with_ca(tmp_path) -> ServerConfig:
    pki.init_ca(tmp_path / "ca")
    pki.issue_server(tmp_path / "ca", "cp", ["10.0.0.1"], tmp_path / "tls")
    tls = ServerTLS(cert=str(tmp_path / "tls/server.pem"), key=str(tmp_path / "tls/server-key.pem"),
                    ca=str(tmp_path / "tls/ca.pem"))
    return attrs.evolve(ServerConfig(), agent_tls=tls)


async def test_a_code_is_made_listed_without_its_secret_revoked_and_audited(make_admin, store, tmp_path):
    await store.set_setting("control.members.cp1", {"holder": "cp1", "agent_address": "10.0.0.1:7443"}, actor="t")
    admin = await make_admin(None, config=config_with_ca(tmp_path))

    made = await admin.call("POST", "/nodes/join-codes", {"ttl": "30m", "name": "gpu01"}, status=201)
    code = parse_code(made["code"])
    assert code.addresses == ("10.0.0.1:7443",) and code.name == "gpu01"
    ca = pki.load_certificate(tmp_path / "ca/ca.pem")
    assert made["ca_sha256"] == pki.fingerprint(ca) and code.ca_sha256 == made["ca_sha256"].replace(":", "").lower()
    assert made["command"] == f"sudo llmgw join {made['code']} --name gpu01"

    listed = await admin.call("GET", "/nodes/join-codes")
    assert [c["id"] for c in listed["codes"]] == [made["id"]] and code.secret not in str(listed)
    events = [(e.action, e.target) for e in await store.list_audit()]
    assert ("nodes.join-code", f"join-code:{made['id']}") in events
    assert code.secret not in str([e.detail for e in await store.list_audit()])

    await admin.call("DELETE", f"/nodes/join-codes/{made['id']}")
    assert (await admin.call("GET", "/nodes/join-codes"))["codes"] == []
    error = await admin.refused("DELETE", f"/nodes/join-codes/{made['id']}", status=404)
    assert "no live join code" in error


async def test_refusals_name_the_field(make_admin, store, tmp_path):
    admin = await make_admin(None, config=config_with_ca(tmp_path))
    assert "no control plane has recorded its agent address" in await admin.refused(
        "POST", "/nodes/join-codes", {}, status=409)
    await store.set_setting("control.members.cp1", {"holder": "cp1", "agent_address": "10.0.0.1:7443"}, actor="t")
    assert "between 1m and 7d" in await admin.refused("POST", "/nodes/join-codes", {"ttl": "30d"}, status=400)
    assert "ttl:" in await admin.refused("POST", "/nodes/join-codes", {"ttl": "soon"}, status=400)
    assert "name 'a b'" in await admin.refused("POST", "/nodes/join-codes", {"name": "a b"}, status=400)
    insecure = await make_admin(None, config=attrs.evolve(ServerConfig(), agent_insecure=True))
    assert "agent_insecure" in await insecure.refused("POST", "/nodes/join-codes", {}, status=409)
