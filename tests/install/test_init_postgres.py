"""Two control planes on one PostgreSQL: the address kept out of server.yaml, the CA shared, the administrator found."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from llmgw.cli.main import main
from llmgw.config import load_server_config
from llmgw.install.layout import Layout
from llmgw.pki import load_certificate

pytestmark = pytest.mark.slow


def _init(root, host: str, dsn: str) -> list[str]:
    return ["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com",
            "--host", host, "--store", dsn, "--no-start"]


def test_a_second_control_plane_keeps_the_copied_ca_and_finds_the_administrator(tmp_path, capsys, postgres_server):
    database = postgres_server.create_database()
    dsn = postgres_server.dsn(database)
    first, second = Layout(tmp_path / "cp1"), Layout(tmp_path / "cp2")

    assert main(_init(first.root, "cp1.example.com", dsn)) == 0
    out = capsys.readouterr().out
    assert "the administrator ops@example.com: made" in out
    assert stat.S_IMODE(os.stat(first.store_dsn_file).st_mode) == 0o600
    assert first.store_dsn_file.read_text().strip() == dsn
    config = load_server_config(first.server_yaml)
    assert f"file:{first.store_dsn_file}" in first.server_yaml.read_text()
    assert config.store.backend == "postgres" and config.store.dsn.reveal() == dsn

    second.etc.mkdir(parents=True)
    shutil.copytree(first.ca_dir, second.ca_dir)
    assert main(_init(second.root, "cp2.example.com", dsn)) == 0
    out = capsys.readouterr().out
    assert "ca.pem: kept" in out
    assert "the administrator ops@example.com: kept" in out and "password, shown once" not in out
    ca = load_certificate(first.ca_dir / "ca.pem")
    assert load_certificate(second.tls / "server.pem").issuer == ca.subject
    assert (second.tls / "ca.pem").read_bytes() == (first.ca_dir / "ca.pem").read_bytes()
