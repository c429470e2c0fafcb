"""The nodes tests' control plane: a join endpoint over TLS on loopback, and join run in a thread."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from llmgw import pki
from llmgw.control.join_codes import JoinCodes
from llmgw.control.join_endpoint import JoinEndpoint
from llmgw.nodes.join import join


@pytest.fixture
async def store(tmp_path):
    from llmgw.store import open_store

    s = await open_store(f"sqlite:///{tmp_path}/store.db")
    yield s
    await s.close()


class Plane:
    """A join endpoint over TLS on loopback, as a control plane serves it on its agent port."""

    def __init__(self, tmp, store, name: str) -> None:
        self.ca_dir = tmp / name / "ca"
        self.tls = tmp / name / "tls"
        pki.init_ca(self.ca_dir, f"{name} CA")
        pki.issue_server(self.ca_dir, name, ["127.0.0.1"], self.tls)
        self.codes = JoinCodes(store)
        self.connected: set[str] = set()
        self.endpoint = JoinEndpoint(self.codes, str(self.tls / "ca.pem"), control_planes=self._planes,
                                     connected=lambda n: n in self.connected)
        self.address = ""
        self.runner: web.AppRunner | None = None

    async def _planes(self) -> list[str]:
        return [self.address]

    @property
    def ca_sha256(self) -> str:
        return pki.fingerprint(pki.load_certificate(self.ca_dir / "ca.pem"))

    async def start(self) -> "Plane":
        app = web.Application()
        app.add_routes(self.endpoint.routes())
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        ctx = pki.ssl_server_context(self.tls / "server.pem", self.tls / "server-key.pem", self.tls / "ca.pem",
                                     require_client=False)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.address = f"127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def code(self, **kw) -> str:
        kw.setdefault("addresses", [self.address])
        kw.setdefault("ca_sha256", self.ca_sha256)
        return (await self.codes.create(actor="admin@example.com", **kw)).text()


@pytest.fixture
async def plane(tmp_path, store):
    p = await Plane(tmp_path, store, "cluster-a").start()
    yield p
    await p.runner.cleanup()


async def join_in_thread(code: str, root, **kw):
    return await asyncio.to_thread(join, code, root=root, say=lambda line: None, **kw)


def files_under(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []
