"""Versions checked at Register: an agent whose protocol this control plane does not speak is refused in words."""

from __future__ import annotations

import aiohttp
import pytest

from llmgw import __version__, wire
from llmgw.wire.channel import PATH, AgentEndpoint
from llmgw.wire.messages import OLDEST_PROTOCOL, PROTOCOL_VERSION


async def _first_answer(register: wire.Register):
    """What a control plane's agent port answers a Register with, over a real WebSocket."""
    sessions = []

    async def on_session(session):
        sessions.append(session)
        async for _ in session:
            pass

    ep = AgentEndpoint(on_session, insecure=True)
    port = await ep.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{port}{PATH}") as ws:
                await ws.send_bytes(wire.encode(register))
                return wire.decode((await ws.receive(timeout=5)).data)
    finally:
        await ep.stop()


async def test_an_agent_too_old_is_refused_naming_both_versions_and_what_to_do():
    answer = await _first_answer(wire.Register(node_id="node-a", protocol=OLDEST_PROTOCOL - 1, agent_version="0.0.1"))
    assert isinstance(answer, wire.Refused)
    assert "llmgw 0.0.1" in answer.reason and f"llmgw {__version__}" in answer.reason
    assert f"protocol {OLDEST_PROTOCOL - 1}, older" in answer.reason
    assert "llmgw ctl upgrade RELEASE" in answer.reason


async def test_an_agent_newer_than_the_control_plane_is_refused_saying_upgrade_the_control_planes_first():
    answer = await _first_answer(wire.Register(node_id="node-a", protocol=PROTOCOL_VERSION + 1, agent_version="9.0.0"))
    assert isinstance(answer, wire.Refused)
    assert "llmgw 9.0.0" in answer.reason and f"llmgw {__version__}" in answer.reason
    assert f"protocol {PROTOCOL_VERSION + 1}, newer" in answer.reason
    assert "upgrade the control planes first" in answer.reason


@pytest.mark.parametrize("protocol", sorted({OLDEST_PROTOCOL, PROTOCOL_VERSION}))
async def test_an_agent_of_another_llmgw_version_inside_the_window_is_welcomed(protocol):
    answer = await _first_answer(wire.Register(node_id="node-a", protocol=protocol, agent_version="0.0.9-other"))
    assert isinstance(answer, wire.Welcome)
