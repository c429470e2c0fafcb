"""A node leaving over the agent port with its own certificate (what `llmgw wipe` sends): the leader forgets it
and its replica, revokes the certificate for good, and says so in the audit log; a standby names the leader."""

from __future__ import annotations

import asyncio

from llmgw import pki
from llmgw.config.load import parse_server_config
from llmgw.control.node_leave import REVOKED_SETTING
from llmgw.control.service import ControlPlane
from llmgw.nodes.leave import Leaving, tell_leaving
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store

from .conftest import ENGINES
from .test_service import FakeAgent, free_port, until


def tls_config(tmp_path, tls):
    return parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}",
        "agent_tls": {"cert": str(tls.cert), "key": str(tls.key), "ca": str(tls.ca)},
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}}],
    })


class TlsAgent(FakeAgent):
    def __init__(self, urls, node) -> None:
        super().__init__(urls)
        from llmgw.wire.channel import AgentConnection

        self.conn = AgentConnection(urls, self.register, backoff_initial=0.1, backoff_max=0.3,
                                    ssl_context=pki.ssl_client_context(node.cert, node.key, node.ca))


async def test_a_node_that_leaves_is_forgotten_its_replica_dropped_and_its_certificate_refused(tmp_path):
    pki.init_ca(tmp_path / "ca")
    server = pki.issue_server(tmp_path / "ca", "cp-1", ["127.0.0.1"], tmp_path / "tls")
    node = pki.issue_node(tmp_path / "ca", "node-a", tmp_path / "node")
    dsn = f"sqlite:///{tmp_path}/store.db"
    store, standby_store = await open_store(dsn), await open_store(dsn)
    replicas = ReplicaSet()
    cp = ControlPlane(tls_config(tmp_path, server), store, replicas, engines=ENGINES, holder="cp-1")
    standby = ControlPlane(tls_config(tmp_path, server), standby_store, ReplicaSet(), engines=ENGINES,
                           holder="cp-2", standby_hold=0.1)
    agent = TlsAgent([f"127.0.0.1:{cp.config.agent_listen.rpartition(':')[2]}"], node)
    try:
        await cp.start()
        assert await cp.leadership.wait_leading(3)
        await standby.start()
        agent.start()
        await until(lambda: replicas.replicas_for("tiny"), what="the replica on node-a")
        [replica] = replicas.replicas_for("tiny")

        # The standby is asked first: it names the leader, and the leader is asked next.
        who = Leaving(node="node-a", cert=str(node.cert), key=str(node.key), ca=str(node.ca),
                      control_planes=(f"127.0.0.1:{standby.agent_port}", f"127.0.0.1:{cp.agent_port}"))
        told, said = await asyncio.to_thread(tell_leaving, who)
        assert told, said
        assert said == (f"control plane 127.0.0.1:{cp.agent_port}: node node-a left the cluster, its certificate "
                        f"is revoked; its replicas ({replica.id}) are placed elsewhere")
        assert cp.nodes() == [] and replicas.replicas_for("tiny") == []
        revoked = (await store.get_setting(REVOKED_SETTING)).value
        assert list(revoked) == [f"{pki.load_certificate(node.cert).serial_number:x}"]
        assert revoked[next(iter(revoked))]["node"] == "node-a"
        [event] = [e for e in await store.list_audit(limit=50) if e.action == "nodes.leave"]
        assert event.actor == "node:node-a" and event.detail["replicas"] == [replica.id]

        # The agent dials again with that certificate: refused, and the node stays out.
        await until(lambda: "revoked" in (agent.conn.last_error or ""), what="the refusal")
        await asyncio.sleep(0.2)  # a reconcile pass: nothing is placed on it
        assert cp.nodes() == [] and replicas.replicas_for("tiny") == []

        # The machine joins again: a new certificate (a new serial) for the same name is welcome.
        await agent.stop()
        again = pki.issue_node(tmp_path / "ca", "node-a", tmp_path / "node-again")
        agent = TlsAgent([f"127.0.0.1:{cp.agent_port}"], again)
        agent.start()
        await until(lambda: [n["id"] for n in cp.nodes()] == ["node-a"], what="node-a back")
    finally:
        await agent.stop()
        await standby.stop()
        await cp.stop()
        await store.close()
        await standby_store.close()


async def test_no_control_plane_heard_names_the_command_that_removes_the_node(tmp_path):
    pki.init_ca(tmp_path / "ca")
    node = pki.issue_node(tmp_path / "ca", "node-a", tmp_path / "node")
    who = Leaving(node="node-a", cert=str(node.cert), key=str(node.key), ca=str(node.ca),
                  control_planes=(f"127.0.0.1:{free_port()}",))
    told, said = await asyncio.to_thread(tell_leaving, who)
    assert not told
    assert said.startswith("no control plane heard that node node-a leaves (127.0.0.1:")
    assert said.endswith("remove it there with `llmgw ctl node remove node-a`")


async def test_while_the_store_cannot_be_read_the_last_revocations_stand(tmp_path):
    from llmgw.control.node_leave import NodeLeave

    class Plane:  # what NodeLeave reads of a control plane here: its store
        def __init__(self, store) -> None:
            self.store = store

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    await store.set_setting(REVOKED_SETTING, {"1f": {"node": "gone", "at": "2026-01-01T00:00:00+00:00"}}, actor="t")
    leave = NodeLeave(Plane(store))
    assert (await leave.revocations()).serials == frozenset({0x1F})
    await store.close()  # from here every read fails
    assert (await leave.revocations()).serials == frozenset({0x1F})


async def test_a_removed_node_has_its_certificate_revoked_and_refused_at_its_next_connection(tmp_path):
    pki.init_ca(tmp_path / "ca")
    server = pki.issue_server(tmp_path / "ca", "cp-1", ["127.0.0.1"], tmp_path / "tls")
    node = pki.issue_node(tmp_path / "ca", "node-a", tmp_path / "node")
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    config = parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}",
        "agent_tls": {"cert": str(server.cert), "key": str(server.key), "ca": str(server.ca)},
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
    })
    cp = ControlPlane(config, store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    agent = TlsAgent([f"127.0.0.1:{cp.config.agent_listen.rpartition(':')[2]}"], node)
    try:
        await cp.start()
        assert await cp.leadership.wait_leading(3)
        agent.start()
        await until(lambda: [n["id"] for n in cp.nodes()] == ["node-a"], what="node-a registered")

        await cp.remove_node("node-a", actor="ann")
        serial = f"{pki.load_certificate(node.cert).serial_number:x}"
        revoked = (await store.get_setting(REVOKED_SETTING)).value
        assert list(revoked) == [serial] and revoked[serial]["node"] == "node-a"
        [event] = [e for e in await store.list_audit(limit=50) if e.action == "nodes.remove"]
        assert event.actor == "ann" and event.detail == {"serial": serial}

        # Its agent, cut off, dials again with the same certificate: refused in words, and it stays out.
        await until(lambda: "revoked" in (agent.conn.last_error or ""), what="the refusal")
        await asyncio.sleep(0.3)
        assert cp.nodes() == []
    finally:
        await agent.stop()
        await cp.stop()
        await store.close()
