"""`llmgw server init --patroni` through the command line: what it writes for three machines (two PostgreSQL
members and a third etcd vote), TLS everywhere, secrets kept 0600, the store's address naming every member; and
each wrong field refused with its name, nothing written. (tests/store/test_patroni_slow.py runs what it writes.)"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from llmgw.cli.main import main
from llmgw.pki import init_ca

MEMBERS = "db1=10.0.0.149,db2=10.0.0.150"
ETCD = "db1=10.0.0.149,db2=10.0.0.150,ctl=10.0.0.140"


@pytest.fixture
def ca(tmp_path) -> Path:
    init_ca(tmp_path / "ca")
    return tmp_path / "ca"


@pytest.fixture
def bins(tmp_path) -> Path:
    folder = tmp_path / "pg" / "16" / "bin"
    folder.mkdir(parents=True)
    for name in ("initdb", "pg_ctl", "psql"):
        (folder / name).write_text("")
    return folder


def init(tmp_path, ca, bins, *extra: str, members: str = MEMBERS, etcd: str | None = ETCD) -> int:
    argv = ["server", "init", "--patroni", "--members", members, "--out", str(tmp_path / "out"), "--ca", str(ca),
            "--pg-bin", str(bins), *extra]
    return main(argv + (["--etcd", etcd] if etcd else []))


def test_three_machines_get_their_folders_and_the_store_every_member(tmp_path, ca, bins, capsys):
    assert init(tmp_path, ca, bins) == 0
    out = tmp_path / "out"
    said = capsys.readouterr().out
    assert "sudo sh install.sh" in said and "***" in said
    assert sorted(p.name for p in out.iterdir()) == ["ctl", "db1", "db2", "store-dsn"]
    dsn = (out / "store-dsn").read_text().strip()
    assert dsn.startswith("postgresql://llmgw:") and "@10.0.0.149:5432,10.0.0.150:5432/llmgw?" in dsn
    assert "target_session_attrs=read-write" in dsn and "sslmode=verify-full" in dsn
    assert "sslrootcert=/etc/llmgw/tls/ca.pem" in dsn
    password = dsn.split(":", 2)[2].split("@")[0]
    assert password not in said  # printed with the password hidden
    assert "sslrootcert=/etc/llmgw/tls/ca.pem" in said  # and readable

    conf = yaml.safe_load((out / "db1/patroni/patroni.yml").read_text())
    assert conf["name"] == "db1" and conf["etcd3"]["protocol"] == "https"
    assert conf["etcd3"]["hosts"] == ["10.0.0.149:2379", "10.0.0.150:2379", "10.0.0.140:2379"]
    assert conf["restapi"]["verify_client"] == "required"
    assert conf["restapi"]["certfile"] == "/etc/llmgw/patroni/tls/member.pem"
    assert conf["postgresql"]["data_dir"] == "/var/lib/postgresql/16/llmgw"
    assert conf["postgresql"]["parameters"]["ssl"] == "on"
    hba = conf["postgresql"]["pg_hba"]
    assert "hostssl replication replicator 10.0.0.150/32 scram-sha-256" in hba
    assert "hostssl llmgw llmgw 10.0.0.140/32 scram-sha-256" in hba  # the control plane holding the third vote
    assert not [line for line in hba if line.startswith("host ")]  # no connection over the network without TLS
    env = (out / "db1/patroni/patroni.env").read_text()
    secrets = [line.split("=", 1)[1] for line in env.splitlines() if "_PASSWORD=" in line]
    assert len(secrets) == 3 and not [s for s in secrets if s in (out / "db1/patroni/patroni.yml").read_text()]
    assert "PATRONI_REPLICATION_PASSWORD=" in env and "PATRONI_RESTAPI_PASSWORD=" in env
    assert (out / "db2/patroni/patroni.env").read_text() == env  # one cluster, one set of passwords
    assert (out / "db1/patroni/llmgw-password").read_text().strip() == password

    assert not (out / "ctl/patroni").exists() and (out / "ctl/etcd/etcd.env").exists()
    etcd = (out / "ctl/etcd/etcd.env").read_text()
    assert "ETCD_INITIAL_CLUSTER=db1=https://10.0.0.149:2380,db2=https://10.0.0.150:2380,ctl=https://10.0.0.140:2380" in etcd
    assert "ETCD_CLIENT_CERT_AUTH=true" in etcd and "ETCD_PEER_CLIENT_CERT_AUTH=true" in etcd

    for secret in ["store-dsn", "db1/patroni/patroni.env", "db1/patroni/llmgw-password", "db1/patroni/tls/member-key.pem",
                   "db1/etcd/etcd.env", "db1/etcd/tls/member-key.pem", "ctl/etcd/tls/member-key.pem"]:
        assert (out / secret).stat().st_mode & 0o777 == 0o600, secret

    cert = x509.load_pem_x509_certificate((out / "db1/patroni/tls/member.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "10.0.0.149" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    uses = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u._name for u in uses} == {"serverAuth", "clientAuth"}  # serves its peers and dials them
    ssl.create_default_context(cafile=str(out / "db1/patroni/tls/ca.pem")).load_cert_chain(
        str(out / "db1/patroni/tls/member.pem"), str(out / "db1/patroni/tls/member-key.pem"))

    unit = (out / "db1/llmgw-patroni.service").read_text()
    assert "User=postgres" in unit and "EnvironmentFile=/etc/llmgw/patroni/patroni.env" in unit
    assert "ExecStart=/usr/bin/patroni /etc/llmgw/patroni/patroni.yml" in unit
    assert "User=etcd" in (out / "ctl/llmgw-etcd.service").read_text()
    script = (out / "db1/install.sh").read_text()
    assert "systemctl enable --now llmgw-etcd.service llmgw-patroni.service" in script
    assert "systemctl enable --now llmgw-etcd.service\n" in (out / "ctl/install.sh").read_text()


@pytest.mark.parametrize(("members", "etcd", "extra", "said"), [
    ("db1=10.0.0.149", None, [], "--members: give two or more"),
    ("db1=10.0.0.149,db1=10.0.0.150", None, [], "--members: the name 'db1' is given twice"),
    ("10.0.0.1:5432,10.0.0.1:5432", None, [], "--members: 10.0.0.1:5432 is used twice"),
    ("a=10.0.0.1:99999,b=10.0.0.2", None, [], "--members: 'a=10.0.0.1:99999' has the port '99999'"),
    ("bad name=10.0.0.1,b=10.0.0.2", None, [], "--members: member name 'bad name' is not allowed"),
    (MEMBERS, "a=10.0.0.1,b=10.0.0.2", [], "--etcd: 2 etcd members cannot outvote"),
    (MEMBERS, None, ["--ttl", "5", "--loop-wait", "4"], "--ttl: 5 s must be at least"),
    (MEMBERS, None, ["--clients", "not-an-address"], "--clients: 'not-an-address' is not an address"),
])
def test_a_wrong_field_is_named_and_nothing_is_written(tmp_path, ca, bins, capsys, members, etcd, extra, said):
    # Two members and no --etcd: an etcd on each, two votes, refused too; a third is given where that is not the point.
    if etcd is None and "," in members and "--etcd" not in said:
        etcd = ",".join([*members.split(","), "ctl=10.0.0.140"])
    assert init(tmp_path, ca, bins, *extra, members=members, etcd=etcd) == 2
    err = capsys.readouterr().err
    assert said in err and "nothing was written" in err
    assert not (tmp_path / "out").exists()


def test_no_ca_or_a_used_folder_is_refused(tmp_path, ca, bins, capsys):
    assert init(tmp_path, tmp_path / "nowhere", bins) == 2
    assert "--ca: " in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "store-dsn").write_text("x")
    assert init(tmp_path, ca, bins) == 2
    assert "--out: " in capsys.readouterr().err and (tmp_path / "out" / "store-dsn").read_text() == "x"


def test_a_dry_run_checks_and_writes_nothing(tmp_path, ca, bins, capsys):
    assert init(tmp_path, ca, bins, "--dry-run") == 0
    assert "nothing written" in capsys.readouterr().out and not (tmp_path / "out").exists()
    assert init(tmp_path, ca, bins, "--dry-run", etcd="a=10.0.0.1,b=10.0.0.2") == 2  # still checked


def test_the_members_an_address_names_are_counted():
    from llmgw.obs.store_metrics import address_members

    assert address_members("postgresql://llmgw:p@10.0.0.149:5432,10.0.0.150:5432,[::1]:5432/llmgw?sslmode=verify-full") == 3
    assert address_members("postgres://llmgw:***@db1/llmgw") == 1


def test_three_members_hold_the_votes_themselves_and_clients_can_be_named(tmp_path, ca, bins):
    members = "db1=10.0.0.1,db2=10.0.0.2,db3=10.0.0.3"
    assert init(tmp_path, ca, bins, "--clients", "10.0.9.0/24", members=members, etcd=None) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["db1", "db2", "db3", "store-dsn"]
    for name in ("db1", "db2", "db3"):  # each holds a vote: no other machine needed
        etcd = (out / name / "etcd" / "etcd.env").read_text()
        assert ("ETCD_INITIAL_CLUSTER=db1=https://10.0.0.1:2380,db2=https://10.0.0.2:2380,db3=https://10.0.0.3:2380"
                in etcd)
    hba = yaml.safe_load((out / "db1/patroni/patroni.yml").read_text())["postgresql"]["pg_hba"]
    assert [line for line in hba if line.startswith("hostssl llmgw")] == ["hostssl llmgw llmgw 10.0.9.0/24 scram-sha-256"]
    assert "@10.0.0.1:5432,10.0.0.2:5432,10.0.0.3:5432/llmgw?" in (out / "store-dsn").read_text()
    script = (out / "db1/install.sh").read_text()
    assert "systemctl mask etcd.service patroni.service" in script  # Debian's own units would run a second copy
    assert "pg_lsclusters" in script and "pg_dropcluster --stop VERSION main" in script
