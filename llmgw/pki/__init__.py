"""The cluster's own CA and certificates: making them, and the TLS contexts built from them.

See docs/certificates.md for the operator's side.
"""

from llmgw.pki.certs import (
    CA_CERT,
    CA_DAYS,
    CA_KEY,
    DEFAULT_CA_NAME,
    LEAF_DAYS,
    InvalidName,
    IssuedFiles,
    PkiError,
    cert_files,
    common_name,
    describe,
    fingerprint,
    init_ca,
    issue_client,
    issue_node,
    issue_peer,
    issue_server,
    load_certificate,
    validate_node_id,
)
from llmgw.pki.tls import (
    RevocationList,
    peer_certificate,
    peer_common_name,
    ssl_client_context,
    ssl_server_context,
)

__all__ = [
    "CA_CERT",
    "CA_DAYS",
    "CA_KEY",
    "DEFAULT_CA_NAME",
    "LEAF_DAYS",
    "InvalidName",
    "IssuedFiles",
    "PkiError",
    "RevocationList",
    "cert_files",
    "common_name",
    "describe",
    "fingerprint",
    "init_ca",
    "issue_client",
    "issue_node",
    "issue_peer",
    "issue_server",
    "load_certificate",
    "peer_certificate",
    "peer_common_name",
    "ssl_client_context",
    "ssl_server_context",
    "validate_node_id",
]
