"""A control plane's files laid out in a folder: server.yaml with certificates beside it, a token and a store
outside it, and a store holding real data (an organization, a project, a key, usage rows)."""

from __future__ import annotations

import datetime as dt
import socket
import textwrap
from pathlib import Path

import attrs
import pytest

from llmgw.auth.keys import hash_secret, new_secret, visible_prefix
from llmgw.config import ServerConfig, load_server_config
from llmgw.store import Store, UsageRow, open_store

AT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@attrs.frozen
class Machine:
    root: Path
    config_path: Path
    store_dsn: str
    token: Path

    @property
    def etc(self) -> Path:
        return self.config_path.parent

    @property
    def db(self) -> Path:
        return Path(self.store_dsn)

    def config(self) -> ServerConfig:
        return load_server_config(self.config_path)


def lay_out(root: Path, store_dsn: str | None = None, *, keep: int = 7, backup_dir: str = "") -> Machine:
    """/etc/llmgw and /var/lib/llmgw of one machine, under `root`."""
    etc = root / "etc" / "llmgw"
    var = root / "var" / "lib" / "llmgw"
    (etc / "tls").mkdir(parents=True)
    var.mkdir(parents=True)
    dsn = store_dsn or str(var / "llmgw.db")
    token = var / "admin-token"
    token.write_text("admin-token-of-" + root.name + "\n")
    token.chmod(0o600)
    for name, text in (("ca.pem", "CA\n"), ("server.pem", "CERT\n"), ("server-key.pem", "PRIVATE KEY\n")):
        (etc / "tls" / name).write_text(text)
    (etc / "tls" / "server-key.pem").chmod(0o600)
    config_path = etc / "server.yaml"
    config_path.write_text(textwrap.dedent(f"""\
        # this machine's server.yaml
        admin_listen: 127.0.0.1:{free_port()}
        admin_token_file: {token}
        agent_tls:
          cert: {etc}/tls/server.pem
          key: {etc}/tls/server-key.pem
          ca: {etc}/tls/ca.pem
        store:
          dsn: {dsn}
        backup:
          dir: "{backup_dir}"
          keep: {keep}
        """))
    return Machine(root=root, config_path=config_path, store_dsn=dsn, token=token)


@pytest.fixture
async def machine(tmp_path) -> Machine:
    """A machine whose store exists (migrated, empty) and is not open."""
    m = lay_out(tmp_path / "cp1")
    store = await open_store(m.store_dsn)
    await store.close()
    return m


@attrs.frozen
class Seeded:
    org_id: str
    project_id: str
    key_id: str
    key_hash: str


async def seed(store: Store) -> Seeded:
    org = await store.create_org("acme")
    project = await store.create_project(org.id, "search")
    secret = new_secret()
    key = await store.create_key(key_hash=hash_secret(secret), prefix=visible_prefix(secret), name="svc",
                                 project_id=project.id)
    rows = [UsageRow(request_id=f"req-{i}", at=AT + dt.timedelta(minutes=i), key_id=key.id,
                     project_id=project.id, org_id=org.id, model_requested="qwen", model_served="qwen",
                     prompt_tokens=100, completion_tokens=10 + i, cost_micros=1000 + i)
            for i in range(5)]
    assert await store.insert_usage_rows(rows) == 5
    return Seeded(org.id, project.id, key.id, hash_secret(secret))


async def check_seeded(store: Store, seeded: Seeded) -> None:
    """What seed() wrote, read back through the store API."""
    org = await store.get_org_by_name("acme")
    assert org is not None and org.id == seeded.org_id
    keys = await store.list_keys(project_id=seeded.project_id)
    assert [k.id for k in keys] == [seeded.key_id]
    resolved = await store.resolve_key(seeded.key_hash)
    assert resolved is not None and resolved.key.id == seeded.key_id
    for i in range(5):
        row = await store.get_usage(f"req-{i}")
        assert row is not None and row.completion_tokens == 10 + i and row.key_id == seeded.key_id
