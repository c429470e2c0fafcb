"""The cluster's own certificate authority: make it, issue from it, read what it issued.

The agent port is mutual TLS between certificates of one private CA: a
node's identity is its certificate's common name. Public authorities no
longer issue the clientAuth usage, so this CA is the only source of node
certificates. Keys are ECDSA P-256: every TLS stack takes them, and they
are small and fast.

Layout: the CA directory holds `ca.pem` and `ca-key.pem` (0600); each
issue writes `<stem>.pem`, `<stem>-key.pem` (0600) and a copy of `ca.pem`
into the output directory, which is what a node or a control plane needs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Sequence

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "CA_DAYS",
    "LEAF_DAYS",
    "PkiError",
    "InvalidName",
    "IssuedFiles",
    "cert_files",
    "init_ca",
    "issue_server",
    "issue_node",
    "issue_client",
    "validate_node_id",
    "load_certificate",
    "common_name",
    "fingerprint",
    "describe",
]

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
CA_DAYS = 3650  # ten years: replacing the CA means re-issuing every node
LEAF_DAYS = 730  # two years: long enough to forget, short enough to rotate
DEFAULT_CA_NAME = "llmgw cluster CA"

# Issued before "now" by this much, so a node whose clock is a little behind
# the issuer's does not see a certificate from the future.
_BACKDATE = dt.timedelta(minutes=5)
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


class PkiError(Exception):
    """A certificate could not be made, found or read; the message says what to do."""


class InvalidName(PkiError, ValueError):
    """A node id, host or name given by the caller is not one a certificate can carry."""


@attrs.frozen
class IssuedFiles:
    """Where one identity's files are: its certificate, its key, and the CA to trust."""

    cert: Path
    key: Path
    ca: Path


def cert_files(directory: str | os.PathLike[str], stem: str) -> IssuedFiles:
    """The paths `issue_*` writes for `stem` ("server", "node", "client") in a directory."""
    d = Path(directory)
    return IssuedFiles(cert=d / f"{stem}.pem", key=d / f"{stem}-key.pem", ca=d / CA_CERT)


# --- Making -------------------------------------------------------------------


def init_ca(
    directory: str | os.PathLike[str],
    name: str = DEFAULT_CA_NAME,
    *,
    force: bool = False,
    days: int = CA_DAYS,
) -> IssuedFiles:
    """Make a new CA in `directory` (ca.pem, ca-key.pem); refuse to replace one unless `force`."""
    d = Path(directory)
    files = IssuedFiles(cert=d / CA_CERT, key=d / CA_KEY, ca=d / CA_CERT)
    existing = [p.name for p in (files.cert, files.key) if p.exists()]
    if existing and not force:
        raise PkiError(
            f"{d} already holds a CA ({', '.join(existing)}); every certificate it issued "
            "trusts it. Pass --force to replace it, then re-issue every server and node certificate"
        )
    if not name.strip():
        raise InvalidName("the CA needs a name")
    _check_days(days)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    _make_dir(d)
    _write_key(files.key, key)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def issue_server(
    ca_dir: str | os.PathLike[str],
    name: str,
    hosts: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    days: int = LEAF_DAYS,
) -> IssuedFiles:
    """A server certificate (serverAuth) for every address clients dial: server.pem, server-key.pem.

    Each host becomes an IP or a DNS name in the certificate; nothing is added
    that was not given (no implicit localhost).
    """
    if not name.strip():
        raise InvalidName("a server certificate needs a name (its common name)")
    if not hosts:
        raise InvalidName(
            f"server certificate {name!r} needs at least one --host: every address or DNS name "
            "clients dial it by"
        )
    sans = _subject_alt_names(hosts)
    return _issue(ca_dir, out_dir, "server", name, ExtendedKeyUsageOID.SERVER_AUTH, sans, days)


def issue_node(
    ca_dir: str | os.PathLike[str],
    node_id: str,
    out_dir: str | os.PathLike[str],
    *,
    days: int = LEAF_DAYS,
) -> IssuedFiles:
    """A node's client certificate (clientAuth) whose common name is its id: node.pem, node-key.pem."""
    validate_node_id(node_id)
    return _issue(ca_dir, out_dir, "node", node_id, ExtendedKeyUsageOID.CLIENT_AUTH, [], days)


def issue_client(
    ca_dir: str | os.PathLike[str],
    name: str,
    out_dir: str | os.PathLike[str],
    *,
    stem: str = "client",
    days: int = LEAF_DAYS,
) -> IssuedFiles:
    """A client certificate (clientAuth) for anything else that dials with one (the mirror's API)."""
    validate_node_id(name, what="client name")
    return _issue(ca_dir, out_dir, stem, name, ExtendedKeyUsageOID.CLIENT_AUTH, [], days)


def issue_peer(
    ca_dir: str | os.PathLike[str],
    name: str,
    hosts: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    stem: str = "member",
    days: int = LEAF_DAYS,
) -> IssuedFiles:
    """A certificate for a member of a cluster that both serves its peers and dials them (a Patroni member:
    PostgreSQL, its REST API, etcd's peer and client ports), so serverAuth and clientAuth, for `hosts`."""
    validate_node_id(name, what="member name")
    sans = _subject_alt_names(hosts)
    return _issue(ca_dir, out_dir, stem, name, (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
                  sans, days)


def validate_node_id(node_id: str, *, what: str = "node id") -> str:
    """Letters, digits, `.`, `-`, `_`; starting with a letter or digit; at most 63 characters."""
    if not isinstance(node_id, str) or not _NODE_ID.fullmatch(node_id):
        raise InvalidName(
            f"{what} {node_id!r} is not allowed: use letters, digits, '.', '-' and '_', "
            "starting with a letter or digit, at most 63 characters"
        )
    return node_id


def sign_leaf(
    ca_cert: x509.Certificate,
    ca_key,
    *,
    cn: str,
    public,
    usage: x509.ObjectIdentifier | tuple[x509.ObjectIdentifier, ...],
    sans: list[x509.GeneralName] | None = None,
    days: int,
) -> x509.Certificate:
    """A certificate for `public` named `cn`, signed by the CA, for one use (server or client
    authentication), living `days` but never past the CA itself."""
    now = _now()
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(list(usage) if isinstance(usage, tuple) else [usage]),
                       critical=False)  # a tuple: a peer's both uses (issue_peer)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _issue(
    ca_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    stem: str,
    cn: str,
    usage: x509.ObjectIdentifier | tuple[x509.ObjectIdentifier, ...],
    sans: list[x509.GeneralName],
    days: int,
) -> IssuedFiles:
    _check_days(days)
    ca_cert, ca_key = _load_ca(Path(ca_dir))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = sign_leaf(ca_cert, ca_key, cn=cn, public=key.public_key(), usage=usage, sans=sans, days=days)

    out = Path(out_dir)
    _make_dir(out)
    files = cert_files(out, stem)
    _write_key(files.key, key)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    ca_src = Path(ca_dir) / CA_CERT
    if not files.ca.exists() or not os.path.samefile(ca_src, files.ca):
        tmp = files.ca.with_name(files.ca.name + ".tmp")
        shutil.copyfile(ca_src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, files.ca)
    return files


def _subject_alt_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for raw in hosts:
        host = raw.strip()
        if host.startswith("[") and host.endswith("]"):  # [::1] as written in a URL
            host = host[1:-1]
        if not host or host in seen:
            continue
        seen.add(host)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        name = host.rstrip(".").lower()
        labels = name.split(".")
        wildcard = labels[0] == "*" and len(labels) > 2
        if len(name) > 253 or not all(_DNS_LABEL.fullmatch(lab) for lab in labels[1 if wildcard else 0:]):
            raise InvalidName(
                f"host {raw!r} is neither an IP address nor a DNS name; give each address or name "
                "clients dial, one per --host"
            )
        names.append(x509.DNSName(name))
    if not names:
        raise InvalidName("no usable --host given")
    return names


# --- Reading ------------------------------------------------------------------


def load_certificate(path: str | os.PathLike[str]) -> x509.Certificate:
    """The first certificate in a PEM (or DER) file, with an error that says what the file was."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise PkiError(f"{p}: no such file") from None
    except OSError as exc:
        raise PkiError(f"{p}: cannot read it: {exc.strerror}") from None
    if b"PRIVATE KEY-----" in data and b"BEGIN CERTIFICATE" not in data:
        raise PkiError(f"{p} holds a private key, not a certificate")
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError:
        raise PkiError(f"{p} is not a certificate (PEM or DER)") from None


def common_name(cert: x509.Certificate) -> str | None:
    attrs_ = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not attrs_:
        return None
    value = attrs_[0].value
    return value if isinstance(value, str) else value.decode()


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, as colon-separated upper-case hex."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def describe(cert: x509.Certificate, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """What `ctl cert show` prints: subject, names, usages, validity, serial and fingerprint."""
    now = now or _now()
    dns: list[str] = []
    ips: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = list(san.get_values_for_type(x509.DNSName))
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    usages: list[str] = []
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        names = {ExtendedKeyUsageOID.SERVER_AUTH: "server", ExtendedKeyUsageOID.CLIENT_AUTH: "client"}
        usages += [names.get(oid, oid.dotted_string) for oid in eku]
    except x509.ExtensionNotFound:
        pass
    is_ca = False
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        pass
    if is_ca:
        usages.insert(0, "ca")
    not_after = cert.not_valid_after_utc
    return {
        "subject": cert.subject.rfc4514_string(),
        "common_name": common_name(cert),
        "issuer": cert.issuer.rfc4514_string(),
        "serial": format(cert.serial_number, "x"),
        "is_ca": is_ca,
        "usages": usages,
        "dns_names": dns,
        "ip_addresses": ips,
        "not_before": cert.not_valid_before_utc.isoformat(),
        "not_after": not_after.isoformat(),
        "days_left": (not_after - now).days,
        "expired": not_after <= now,
        "key": _key_kind(cert),
        "sha256": fingerprint(cert),
    }


# --- Helpers ------------------------------------------------------------------


def _load_ca(d: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = d / CA_CERT, d / CA_KEY
    for p in (cert_path, key_path):
        if not p.exists():
            raise PkiError(
                f"no CA in {d}: {p.name} is missing. Make one with `llmgw ctl cert init-ca --dir {d}`, "
                "or point --dir at the directory that holds ca.pem and ca-key.pem"
            )
    cert = load_certificate(cert_path)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise PkiError(f"{key_path} is not an unencrypted PEM private key: {exc}") from None
    except OSError as exc:
        raise PkiError(f"{key_path}: cannot read it: {exc.strerror}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{key_path} is not an ECDSA key; make the CA with `llmgw ctl cert init-ca`")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise PkiError(f"{key_path} is not the key of {cert_path}: the two files come from different CAs")
    if cert.not_valid_after_utc <= _now():
        raise PkiError(f"the CA in {cert_path} expired on {cert.not_valid_after_utc:%Y-%m-%d}; make a new one")
    return cert, key


def _key_kind(cert: x509.Certificate) -> str:
    pub = cert.public_key()
    if isinstance(pub, ec.EllipticCurvePublicKey):
        return f"ECDSA {pub.curve.name}"
    return type(pub).__name__.removeprefix("_").replace("PublicKey", "")


def _check_days(days: int) -> None:
    if days < 1:
        raise InvalidName(f"validity must be at least one day, got {days}")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _make_dir(d: Path) -> None:
    d.mkdir(mode=0o700, parents=True, exist_ok=True)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(path, data, 0o600)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write through a temporary file created with its final mode, so a key is never readable by others."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)  # the umask may have taken bits off
    os.replace(tmp, path)
