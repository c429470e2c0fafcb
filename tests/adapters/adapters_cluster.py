"""A real `llmgw server` process, an agent in the test's process, and a mirror the adapters are fetched from."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import openai
from agent_cluster import kill_shards, make_agent
from aiohttp import web

from llmgw.admin.testing import free_port
from llmgw.mirror.importer import import_file
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.plugins.manager import load_plugins


class Served:
    """`async with Served(tmp, models) as s:` a server whose client API is s.client, its agent s.agent."""

    def __init__(self, tmp: Path, models: list[dict], **agent_config) -> None:
        self.tmp, self.models, self.agent_config = tmp, models, agent_config
        self.layout = Layout(tmp / "mirror")
        self.ports = {k: free_port() for k in ("client", "admin", "agent", "metrics")}

    async def mirror_file(self, path: Path, name: str) -> tuple[str, str]:
        """The file put in the mirror as `name`: (its source, its sha256)."""
        result = await import_file(self.layout, path, name)
        return f"{result.model}/{result.version}/{path.name}", result.files[0].sha256

    async def __aenter__(self) -> Served:
        (self.tmp / "mirror").mkdir(parents=True, exist_ok=True)
        self.mirror = web.AppRunner(build_file_app(self.layout))
        await self.mirror.setup()
        await web.TCPSite(self.mirror, "127.0.0.1", 0).start()
        mirror_url = f"http://127.0.0.1:{self.mirror.addresses[0][1]}"
        p = self.ports
        (self.tmp / "server.yaml").write_text(json.dumps({
            "listen": f"127.0.0.1:{p['client']}", "admin_listen": f"127.0.0.1:{p['admin']}",
            "admin_token_file": str(self.tmp / "admin-token"), "metrics_listen": f"127.0.0.1:{p['metrics']}",
            "agent_listen": f"127.0.0.1:{p['agent']}", "agent_insecure": True,
            "store": {"dsn": f"sqlite:///{self.tmp}/store.db"}, "auth": {"keys_required": False},
            "control": {"reconcile_interval": "300ms"}, "mirror": {"url": mirror_url}, "models": self.models,
        }))
        self.log = open(self.tmp / "server.log", "wb")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "llmgw", "server", "--config", str(self.tmp / "server.yaml")],
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=self.log, stderr=subprocess.STDOUT)
        self.agent = make_agent(self.tmp, SimpleNamespace(address=f"127.0.0.1:{p['agent']}"), gpus=0,
                                plugins=load_plugins(), **self.agent_config)
        self.task = asyncio.create_task(self.agent.run())
        self.client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{p['client']}/v1", api_key="none",
                                         max_retries=0, timeout=120)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        await self.agent.stop()
        try:
            await asyncio.wait_for(self.task, 10)
        except (asyncio.TimeoutError, Exception):
            pass
        kill_shards(self.agent)
        self.server.terminate()
        self.server.wait(30)
        self.log.close()
        await self.mirror.cleanup()

    def server_log(self) -> str:
        return (self.tmp / "server.log").read_text(errors="replace")[-4000:]

    async def ask(self, model: str, text: str, *, wait: float = 120, **extra):
        """The answer to `text`, retried while the model is not served yet (the server and engine starting)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return await self.client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": text}], **extra)
            except (openai.APIConnectionError, openai.NotFoundError, openai.InternalServerError) as exc:
                if time.monotonic() > deadline or self.server.poll() is not None:
                    raise AssertionError(f"{model}: {exc}\n{self.server_log()}") from None
                await asyncio.sleep(0.5)

    def ctl(self, *argv: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "llmgw", "ctl", *argv, "--admin",
                               f"http://127.0.0.1:{self.ports['admin']}", "--token-file",
                               str(self.tmp / "admin-token")], capture_output=True, text=True, input=input)
