"""A whole server in the test's process (client API, admin API, store) in front of the sim engine, with a
project, a person and their keys, for kept requests: `async with kept_server(tmp_path, monkeypatch) as s`.

The sim engine serves `m`, `other` and `echo` (which answers with the last user message, so an answer shows
what reached the engine). `s.ctl(capsys, ARGV…)` runs `llmgw ARGV` in a thread (the server runs on this
loop) with LLMGW_ADMIN_URL and LLMGW_ADMIN_TOKEN set to it; `s.admin(method, path)` calls the admin API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import openai

from llmgw.auth.keys import hash_secret, new_secret, visible_prefix
from llmgw.simengine import SimOptions, start
from llmgw.store import open_store

MODELS = ("m", "other", "echo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@attrs.define
class KeptServer:
    base_url: str
    admin_url: str
    token: str
    db: str
    config: str
    key_id: str
    secret: str
    member_key_id: str
    member_secret: str
    email: str

    def client(self, secret: str | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=secret or self.secret, max_retries=0)

    async def admin(self, method: str, path: str, body: Any = None, **query: Any) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http, http.request(
                method, self.admin_url + "/api/v1" + path, json=body, params=query or None,
                headers={"Authorization": f"Bearer {self.token}"}) as resp:
            return resp.status, await resp.json(content_type=None)

    async def ctl(self, capsys, *argv: str) -> tuple[int, str, str]:
        """`llmgw ARGV` in a thread: (exit code, stdout, stderr)."""
        from llmgw.cli.main import main

        capsys.readouterr()
        code = await asyncio.to_thread(main, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    async def ctl_json(self, capsys, *argv: str) -> Any:
        code, out, err = await self.ctl(capsys, *argv, "--json")
        assert code == 0, err
        return json.loads(out)

    async def usage_of(self, request_id: str, within: float = 10.0) -> tuple[str, str] | None:
        """(key_id, tags) of a request's usage row, once the server wrote it; None when it did not."""
        import sqlite3

        for _ in range(int(within / 0.1)):
            with contextlib.closing(sqlite3.connect(self.db)) as db:
                row = db.execute("SELECT key_id, tags FROM usage WHERE request_id = ?", (request_id,)).fetchone()
            if row is not None:
                return row[0], row[1]
            await asyncio.sleep(0.1)
        return None

    def count_rows(self) -> int:
        """The kept_requests rows in the store's file, expired or not."""
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db)) as db:
            return db.execute("SELECT COUNT(*) FROM kept_requests").fetchone()[0]


@contextlib.asynccontextmanager
async def kept_server(tmp_path: Path, monkeypatch, *, guard: dict | None = None) -> AsyncIterator[KeptServer]:
    from llmgw.config.load import load_server_config
    from llmgw.server import run_server

    engine = await start(SimOptions(models=list(MODELS), ttft=0.0, prefill_per_token=0.0, tpot=0.0, port=0),
                         shutdown_timeout=0.5)
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    org = await store.create_org("acme")
    project = await store.create_project(org.id, "a")
    secret, member_secret = new_secret(), new_secret()
    key = await store.create_key(key_hash=hash_secret(secret), prefix=visible_prefix(secret), name="svc",
                                 project_id=project.id)
    person = await store.create_user("ann@example.com", "Ann")
    await store.add_membership(person.id, "project", project.id)
    member = await store.create_key(key_hash=hash_secret(member_secret), prefix=visible_prefix(member_secret),
                                    name="ann's", project_id=project.id, user_id=person.id)
    await store.close()
    admin = f"127.0.0.1:{_free_port()}"
    listen = f"127.0.0.1:{_free_port()}"
    models = "\n".join(f"  - name: {m}\n    endpoints: [{{url: \"{engine.url}/v1\"}}]" for m in MODELS)
    path = tmp_path / "server.yaml"
    path.write_text(f"""\
listen: "{listen}"
admin_listen: "{admin}"
admin_token_file: {tmp_path / "admin-token"}
metrics_listen: ""
store:
  dsn: {db}
control:
  enabled: false
models:
{models}
""" + (f"guard: {json.dumps(guard)}\n" if guard is not None else ""), encoding="utf-8")
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(load_server_config(path), stop=stop, drain_seconds=1,
                                          config_path=str(path)))
    try:
        token = ""
        async with aiohttp.ClientSession() as http:
            for _ in range(500):
                assert not task.done(), f"the server ended: {task.result()}"
                if (tmp_path / "admin-token").exists():
                    token = (tmp_path / "admin-token").read_text().strip()
                    try:
                        async with http.get(f"http://{admin}/api/v1/summary",
                                            headers={"Authorization": f"Bearer {token}"}) as resp:
                            admin_up = resp.status == 200
                        async with http.get(f"http://{listen}/v1/models",
                                            headers={"Authorization": f"Bearer {secret}"}) as resp:
                            if admin_up and resp.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                await asyncio.sleep(0.02)
        monkeypatch.setenv("LLMGW_ADMIN_URL", f"http://{admin}")
        monkeypatch.setenv("LLMGW_ADMIN_TOKEN", token)
        yield KeptServer(base_url=f"http://{listen}/v1", admin_url=f"http://{admin}", token=token, db=db,
                         config=str(path), key_id=key.id, secret=secret, member_key_id=member.id,
                         member_secret=member_secret, email=person.email)
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 15)
        finally:
            await engine.close()
