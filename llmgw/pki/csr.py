"""A node's certificate from a signing request: the key is made on the node and never leaves it.

`llmgw join` makes a key and a CSR on the node (`make_node_request`); the
control plane signs it with the cluster's CA (`issue_from_request`). The
control plane decides the certificate's name and usage: only the CSR's
public key is taken from it, after its signature is checked, so a request
cannot ask for a server certificate or another node's name.
"""

from __future__ import annotations

import os

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.pki.certs import LEAF_DAYS, PkiError, _load_ca, sign_leaf, validate_node_id

__all__ = ["NodeRequest", "make_node_request", "issue_from_request", "ca_fingerprint_of_pem"]


@attrs.frozen
class NodeRequest:
    """A private key kept on the node and the signing request sent for it, both PEM."""

    key_pem: bytes = attrs.field(repr=False)
    csr_pem: bytes


def make_node_request(node_id: str) -> NodeRequest:
    """A fresh ECDSA P-256 key and a CSR for `node_id` signed by it."""
    validate_node_id(node_id)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return NodeRequest(key_pem=key_pem, csr_pem=csr.public_bytes(serialization.Encoding.PEM))


def issue_from_request(
    ca_dir: str | os.PathLike[str], csr_pem: bytes, node_id: str, *, days: int = LEAF_DAYS
) -> tuple[bytes, bytes]:
    """Sign a node's CSR as a client certificate named `node_id`; returns (certificate PEM, CA PEM)."""
    from pathlib import Path

    validate_node_id(node_id)
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        raise PkiError("the signing request is not a PEM certificate signing request") from None
    if not csr.is_signature_valid:
        raise PkiError("the signing request's signature does not match its key")
    public = csr.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp256r1":
        raise PkiError("the signing request's key must be ECDSA P-256, as `llmgw join` makes")
    ca_cert, ca_key = _load_ca(Path(ca_dir))
    cert = sign_leaf(ca_cert, ca_key, cn=node_id, public=public, usage=ExtendedKeyUsageOID.CLIENT_AUTH, days=days)
    return cert.public_bytes(serialization.Encoding.PEM), ca_cert.public_bytes(serialization.Encoding.PEM)


def ca_fingerprint_of_pem(pem: bytes) -> str:
    """The SHA-256 fingerprint (lower-case hex, no colons) of the first certificate in `pem`."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise PkiError("not a PEM certificate") from None
    return cert.fingerprint(hashes.SHA256()).hex()
