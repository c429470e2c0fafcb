"""The cluster CA: what it issues, where the files go, and what it refuses."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from llmgw import pki


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _eku(cert: x509.Certificate) -> list:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


@pytest.fixture
def ca_dir(tmp_path):
    pki.init_ca(tmp_path / "ca", "test CA")
    return tmp_path / "ca"


def test_init_ca_writes_an_ecdsa_ca_with_a_private_key(tmp_path):
    files = pki.init_ca(tmp_path / "ca", "test CA")
    assert files.cert == tmp_path / "ca" / "ca.pem"
    assert files.key == tmp_path / "ca" / "ca-key.pem"
    assert _mode(files.key) == 0o600
    cert = pki.load_certificate(files.cert)
    assert pki.common_name(cert) == "test CA"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=3649) < life < dt.timedelta(days=3651)


def test_init_ca_refuses_to_replace_a_ca_without_force(ca_dir):
    before = (ca_dir / "ca.pem").read_bytes()
    with pytest.raises(pki.PkiError, match="already holds a CA.*--force"):
        pki.init_ca(ca_dir)
    assert (ca_dir / "ca.pem").read_bytes() == before
    pki.init_ca(ca_dir, force=True)
    assert (ca_dir / "ca.pem").read_bytes() != before


def test_issue_server_puts_each_host_in_the_names(ca_dir, tmp_path):
    files = pki.issue_server(ca_dir, "llmgw-ctl", ["10.0.0.200", "agents.example.com", "::1"], tmp_path / "srv")
    assert files == pki.cert_files(tmp_path / "srv", "server")
    assert _mode(files.key) == 0o600
    assert files.ca.read_bytes() == (ca_dir / "ca.pem").read_bytes()
    cert = pki.load_certificate(files.cert)
    assert pki.common_name(cert) == "llmgw-ctl"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["agents.example.com"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.200"), ipaddress.ip_address("::1")]
    assert _eku(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # Signed by the CA.
    ca = pki.load_certificate(ca_dir / "ca.pem")
    cert.verify_directly_issued_by(ca)


def test_issue_server_adds_no_names_that_were_not_given(ca_dir, tmp_path):
    cert = pki.load_certificate(pki.issue_server(ca_dir, "s", ["db.internal"], tmp_path / "o").cert)
    info = pki.describe(cert)
    assert info["dns_names"] == ["db.internal"]
    assert info["ip_addresses"] == []


@pytest.mark.parametrize("hosts", [[], ["not a host"], ["-bad.example"]])
def test_issue_server_refuses_bad_hosts(ca_dir, tmp_path, hosts):
    with pytest.raises(pki.InvalidName):
        pki.issue_server(ca_dir, "s", hosts, tmp_path / "o")


def test_issue_node_sets_the_node_id_as_common_name_for_client_auth(ca_dir, tmp_path):
    files = pki.issue_node(ca_dir, "gpu-01.rack_3", tmp_path / "n")
    assert files.cert.name == "node.pem" and files.key.name == "node-key.pem"
    assert _mode(files.key) == 0o600
    cert = pki.load_certificate(files.cert)
    assert pki.common_name(cert) == "gpu-01.rack_3"
    assert _eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(pki.load_certificate(ca_dir / "ca.pem"))


def test_issue_client_mirrors_issue_node(ca_dir, tmp_path):
    files = pki.issue_client(ca_dir, "mirror-client", tmp_path / "c")
    assert files.cert.name == "client.pem"
    assert _eku(pki.load_certificate(files.cert)) == [ExtendedKeyUsageOID.CLIENT_AUTH]


@pytest.mark.parametrize("node_id", ["", "a b", "-x", "x" * 64, "nöde", "a/b"])
def test_bad_node_ids_are_refused(ca_dir, tmp_path, node_id):
    with pytest.raises(pki.InvalidName, match="letters, digits"):
        pki.issue_node(ca_dir, node_id, tmp_path / "n")


def test_node_id_of_63_characters_is_fine():
    assert pki.validate_node_id("n" * 63) == "n" * 63


def test_a_missing_ca_says_how_to_make_one(tmp_path):
    with pytest.raises(pki.PkiError, match=r"llmgw ctl cert init-ca --dir .*empty"):
        pki.issue_node(tmp_path / "empty", "n1", tmp_path / "out")


def test_a_ca_key_from_another_ca_is_caught(tmp_path):
    pki.init_ca(tmp_path / "a")
    pki.init_ca(tmp_path / "b")
    (tmp_path / "a" / "ca-key.pem").write_bytes((tmp_path / "b" / "ca-key.pem").read_bytes())
    with pytest.raises(pki.PkiError, match="different CAs"):
        pki.issue_node(tmp_path / "a", "n1", tmp_path / "out")


def test_issuing_into_the_ca_directory_keeps_the_ca(ca_dir):
    before = (ca_dir / "ca.pem").read_bytes()
    pki.issue_node(ca_dir, "n1", ca_dir)
    assert (ca_dir / "ca.pem").read_bytes() == before


def test_describe_reports_usage_expiry_and_fingerprint(ca_dir, tmp_path):
    files = pki.issue_node(ca_dir, "n1", tmp_path / "n", days=30)
    info = pki.describe(pki.load_certificate(files.cert))
    assert info["common_name"] == "n1"
    assert info["usages"] == ["client"]
    assert 29 <= info["days_left"] <= 30
    assert not info["expired"]
    assert len(info["sha256"].split(":")) == 32


def test_show_refuses_a_key_file(ca_dir):
    with pytest.raises(pki.PkiError, match="private key, not a certificate"):
        pki.load_certificate(ca_dir / "ca-key.pem")


def test_ssl_contexts_load_the_issued_files(ca_dir, tmp_path):
    srv = pki.issue_server(ca_dir, "s", ["127.0.0.1"], tmp_path / "s")
    node = pki.issue_node(ca_dir, "n1", tmp_path / "n")
    server_ctx = pki.ssl_server_context(srv.cert, srv.key, srv.ca)
    assert server_ctx.verify_mode == ssl.CERT_REQUIRED
    assert pki.ssl_server_context(srv.cert, srv.key, srv.ca, require_client=False).verify_mode == ssl.CERT_OPTIONAL
    client_ctx = pki.ssl_client_context(node.cert, node.key, node.ca)
    assert client_ctx.check_hostname and client_ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(pki.PkiError, match="init-ca"):
        pki.ssl_client_context(None, None, tmp_path / "nowhere" / "ca.pem")


def test_revocation_list_by_serial_or_common_name(ca_dir, tmp_path):
    cert = pki.load_certificate(pki.issue_node(ca_dir, "n1", tmp_path / "n").cert)
    assert pki.RevocationList().reason(cert) is None
    assert not pki.RevocationList()
    by_cn = pki.RevocationList(common_names={"n1"})
    assert "revoked" in by_cn.reason(cert)
    hex_serial = pki.describe(cert)["serial"]
    assert pki.RevocationList(serials={hex_serial}).is_revoked(cert)
    assert pki.RevocationList(serials=[cert.serial_number]).is_revoked(cert)
    assert not pki.RevocationList(serials={1}, common_names={"n2"}).is_revoked(cert)
    with pytest.raises(pki.PkiError):
        pki.RevocationList(serials={"zz"})
