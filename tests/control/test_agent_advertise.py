"""What a control plane tells agents of where to reach it is its agent_advertise (or LLMGW_AGENT_ADVERTISE), not
its agent_listen: in the Welcome, in the ControlPlanes message, in the answer of the join endpoint's list."""

from __future__ import annotations

import pytest

from llmgw.config.advertise import ADVERTISE_ENV
from llmgw.config.load import parse_server_config
from llmgw.control.service import ControlPlane
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store

from .conftest import ENGINES
from .test_service import FakeAgent, free_port, until


def config(**keys):
    return parse_server_config({"agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
                                "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"}, **keys})


class WelcomedAgent(FakeAgent):
    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.told: list[tuple[str, ...]] = []

    async def on_session(self, session) -> None:
        self.told.append(tuple(session.welcome.control_planes))
        await super().on_session(session)


async def test_agents_are_sent_the_advertised_addresses(tmp_path, monkeypatch):
    monkeypatch.delenv(ADVERTISE_ENV, raising=False)
    dsn = f"sqlite:///{tmp_path}/store.db"
    store1, store2 = await open_store(dsn), await open_store(dsn)
    # One from server.yaml, the other from the variable (as each pod of a StatefulSet has its own).
    cp1 = ControlPlane(config(agent_advertise="cp-0.example.com:30743"), store1, ReplicaSet(), engines=ENGINES,
                       standby_hold=0.3)
    monkeypatch.setenv(ADVERTISE_ENV, "[2001:db8::1]:30744")
    cp2 = ControlPlane(config(agent_advertise="ignored.example.com:7443"), store2, ReplicaSet(), engines=ENGINES,
                       standby_hold=0.3)
    monkeypatch.delenv(ADVERTISE_ENV)
    agent = None
    try:
        await cp1.start()
        assert await cp1.leadership.wait_leading(3)
        await cp2.start()
        advertised = ["[2001:db8::1]:30744", "cp-0.example.com:30743"]
        assert await cp1.control_planes() == advertised  # what the join endpoint and join codes hand out too
        assert cp1.holder.startswith("cp-0.example.com:30743 ")  # the leader a standby names to agents

        agent = WelcomedAgent([f"127.0.0.1:{cp1.agent_port}"])
        agent.start()
        await until(lambda: agent.told, what="the Welcome")
        assert sorted(agent.told[0]) == advertised
        await until(lambda: agent.control_planes, what="a ControlPlanes message")
        assert sorted(agent.control_planes[-1]) == sorted(
            ["ws://cp-0.example.com:30743/agent/v1", "ws://[2001:db8::1]:30744/agent/v1"])
    finally:
        if agent is not None:
            await agent.stop()
        await cp2.stop()
        await cp1.stop()
        await store1.close()
        await store2.close()
