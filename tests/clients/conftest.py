"""The client suite's gateway: the sim engine behind an in-process gateway, a recording proxy in front.

`served()` starts them: a chat model `sim` (and its alias `gpt-4o-mini`, the name some clients
default to), an embedding model, and the proxy every client is pointed at; its `exchanges` are
what the clients got, checked against OpenAI's document at the end of each test that uses it.
"""

from __future__ import annotations

import attrs
import pytest

from tests.router.conftest import gateway, http, model, sim  # noqa: F401 - the router suite's fixtures

from . import anthropic_check
from .capture import CapturingProxy
from .openapi_check import violations

#: The models the clients ask for: names Claude Code and Codex send by default are aliases of the sim.
ALIASES = ["gpt-4o-mini", "gpt-5", "gpt-5-codex", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-3-5-haiku-20241022"]


@attrs.define
class Served:
    proxy: CapturingProxy
    gateway: object

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def base_url(self) -> str:
        return self.proxy.url + "/v1"

    def check(self) -> None:
        """Every answer an OpenAI endpoint gave fits OpenAI's document; every answer of Anthropic's
        /v1/messages fits the anthropic SDK's types, strictly."""
        found = violations(self.proxy.exchanges) + anthropic_check.violations(self.proxy.exchanges)
        assert not found, "\n".join(found[:20])


@pytest.fixture
async def served(sim, gateway):  # noqa: F811
    proxies: list[CapturingProxy] = []

    async def make(**sim_options) -> Served:
        engine = await sim(models=["sim"], **sim_options)
        gw = await gateway([model("sim", engine, aliases=ALIASES)])
        proxy = await CapturingProxy(gw.url).start()
        proxies.append(proxy)
        return Served(proxy, gw)

    yield make
    for proxy in proxies:
        await proxy.close()
