"""`llmgw server init --yes --root DIR`: what it writes, that it loads, that a second run keeps it, refusals."""

from __future__ import annotations

import os
import stat

import pytest

from llmgw.cli.main import main
from llmgw.config import load_agent_config, load_server_config
from llmgw.install.layout import Layout
from llmgw.pki import load_certificate, describe


def _init(root, *extra: str) -> list[str]:
    return ["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com",
            "--host", "cp1.example.com", "--host", "10.0.0.140", "--no-start", *extra]


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _tree(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[path] = f.read()
    return out


@pytest.mark.slow  # two real inits: key pairs, the store's migrations, argon2 (~2 s)
def test_init_writes_a_control_plane_that_loads_and_a_second_run_keeps_it(tmp_path, capsys):
    root = tmp_path / "m"
    assert main(_init(root, "--node", "--node-id", "cp1")) == 0
    out = capsys.readouterr().out
    L = Layout(root)
    config = load_server_config(L.server_yaml)
    assert config.agent_tls.cert == str(L.tls / "server.pem")
    assert config.store.dsn.reveal() == str(L.store)
    assert config.admin_listen == "127.0.0.1:9090"
    assert [m.name for m in config.models] == ["llmgw-sim"]
    assert L.server_yaml.read_text().startswith("# server.yaml for the control plane")
    agent = load_agent_config(L.agent_yaml)
    assert agent.node_id == "cp1" and agent.control_planes == ["https://127.0.0.1:7443"]
    server_cert = describe(load_certificate(L.tls / "server.pem"))
    assert server_cert["dns_names"] == ["cp1.example.com", "localhost"]
    assert server_cert["ip_addresses"] == ["10.0.0.140", "127.0.0.1"]
    assert describe(load_certificate(L.tls / "node.pem"))["common_name"] == "cp1"
    for secret in (L.ca_dir / "ca-key.pem", L.tls / "server-key.pem", L.tls / "node-key.pem", L.admin_token):
        assert _mode(secret) == 0o600, secret
    assert _mode(L.ca_dir) == 0o700
    assert _mode(L.server_yaml) == 0o640
    assert L.unit("server").exists() and L.unit("agent").exists() and not L.unit("mirror").exists()
    assert "table inet llmgw" in L.nft.read_text()
    assert "the administrator ops@example.com: made" in out
    assert "password, shown once" in out  # none given: one is made and printed
    before = _tree(root)

    assert main(_init(root, "--node", "--node-id", "cp1")) == 0
    again = capsys.readouterr().out
    assert "server.yaml: kept as it is" in again
    assert "ca.pem: kept" in again and "admin-token: kept" in again
    assert "the administrator ops@example.com: kept" in again
    assert "llmgw-server.service: unchanged" in again and "llmgw.nft: unchanged" in again
    assert "wrote" not in again and "made the" not in again and "password, shown once" not in again
    after = _tree(root)
    changed = {p for p in before if before[p] != after.get(p)} - {str(L.manifest)}
    # Only the store's own files move (SQLite's WAL after opening it again); nothing init wrote.
    assert all("llmgw.db" in p or "usage-journal" in p for p in changed), changed


@pytest.mark.slow  # two real inits (~1 s)
def test_an_operators_edited_server_yaml_and_ca_are_never_replaced(tmp_path, capsys):
    root = tmp_path / "m"
    assert main(_init(root)) == 0
    L = Layout(root)
    edited = L.server_yaml.read_text().replace('listen: ":8080"', 'listen: ":8443"  # mine')
    L.server_yaml.write_text(edited)
    ca = (L.ca_dir / "ca.pem").read_bytes()
    capsys.readouterr()
    assert main(_init(root, "--listen", ":9999")) == 0
    assert L.server_yaml.read_text() == edited
    assert (L.ca_dir / "ca.pem").read_bytes() == ca
    # The firewall follows the file the server reads, not the flag.
    assert "tcp dport 8443 accept" in L.nft.read_text()


@pytest.mark.parametrize("flags,said", [
    (["--store", "postgres://llmgw:secret@127.0.0.1:1/llmgw"], "--store postgres://llmgw:***@127.0.0.1:1/llmgw: cannot connect"),
    (["--host", "not a host!"], "--host 'not a host!': neither an IP address nor a DNS name"),
    (["--listen", "8080"], "--listen '8080'"),
    (["--admin-from", "10.0.0.300/24"], "--admin-from '10.0.0.300/24': not an address or a network"),
    (["--admin-password", "short"], "--admin-password: a password needs at least 10 characters"),
    (["--model", "sim"], "--model sim: a first model needs a node"),
    (["--mirror", "ftp://x"], "--mirror 'ftp://x'"),
    (["--agent-listen", ":8080"], "port 8080 is --listen's too"),
])
def test_a_bad_field_is_named_and_nothing_is_written(tmp_path, capsys, flags, said):
    root = tmp_path / "m"
    assert main(_init(root, *flags)) == 2
    err = capsys.readouterr().err
    assert "nothing was written" in err and said in err
    assert "secret" not in err  # a password in a DSN is never repeated
    assert not root.exists()


def test_dry_run_prints_every_file_and_rule_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "m"
    assert main(_init(root, "--dry-run", "--node", "--admin-from", "10.1.0.0/16")) == 0
    out = capsys.readouterr().out
    L = Layout(root)
    for path in (L.server_yaml, L.agent_yaml, L.unit("server"), L.unit("agent"), L.nft):
        assert f"== {path}" in out
    assert "admin_remote: true" in out and 'admin_listen: ":9090"' in out
    assert "tcp dport 9090 ip saddr { 10.1.0.0/16 } accept" in out
    assert "ExecStart=" in out and "Restart=on-failure" in out
    assert not root.exists()


def test_without_a_terminal_init_asks_for_yes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["server", "init", "--root", str(tmp_path / "m")]) == 2
    assert "give --yes" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_mirror_here_adds_the_mirror_its_unit_and_its_ports(tmp_path, capsys):
    root = tmp_path / "m"
    assert main(_init(root, "--dry-run", "--mirror", "here")) == 0
    out = capsys.readouterr().out
    L = Layout(root)
    assert f"== {L.unit('mirror')}" in out and "mirror serve" in out
    assert "tcp dport 8081" in out  # the mirror's files, for the nodes
    assert not root.exists()
