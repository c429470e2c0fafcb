"""TLS contexts from the cluster's certificates, the peer's identity, and revocation.

Both contexts trust only the cluster's CA, never the system's store: a
certificate from a public authority must not make anyone a node.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import attrs
from cryptography import x509

from llmgw.pki.certs import PkiError, common_name

__all__ = [
    "ssl_server_context",
    "ssl_client_context",
    "peer_certificate",
    "peer_common_name",
    "RevocationList",
]

PathLike = str | os.PathLike[str]


def ssl_server_context(cert: PathLike, key: PathLike, ca: PathLike, *, require_client: bool = True) -> ssl.SSLContext:
    """A server context presenting `cert`; with `require_client`, a client certificate from `ca` is required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cert, key)
    _load_ca(ctx, ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client else ssl.CERT_OPTIONAL
    return ctx


def ssl_client_context(cert: PathLike | None, key: PathLike | None, ca: PathLike) -> ssl.SSLContext:
    """A client context trusting only `ca`, checking the server's name, and presenting `cert` when given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the server and its hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(ctx, ca)
    if cert is not None:
        if key is None:
            raise PkiError(f"{cert} was given without its key")
        _load_chain(ctx, cert, key)
    return ctx


def peer_certificate(ssl_object: Any) -> x509.Certificate | None:
    """The verified certificate the other end presented, or None (no TLS, or no certificate).

    `ssl_object` is an `ssl.SSLObject` or `ssl.SSLSocket`, as aiohttp gives it:
    `request.transport.get_extra_info("ssl_object")`.
    """
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der)


def peer_common_name(ssl_object: Any) -> str | None:
    """The common name of the other end's certificate: on the agent port, the node's id."""
    cert = peer_certificate(ssl_object)
    return common_name(cert) if cert is not None else None


@attrs.frozen
class RevocationList:
    """Certificates no longer trusted, by serial number or by common name; the caller keeps the list."""

    serials: frozenset[int] = attrs.field(default=frozenset(), converter=lambda v: frozenset(_serial(s) for s in v))
    common_names: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)

    def reason(self, cert: x509.Certificate) -> str | None:
        """Why `cert` is refused, or None when it is not revoked."""
        if cert.serial_number in self.serials:
            return f"certificate serial {cert.serial_number:x} is revoked"
        cn = common_name(cert)
        if cn is not None and cn in self.common_names:
            return f"certificates for {cn!r} are revoked"
        return None

    def is_revoked(self, cert: x509.Certificate) -> bool:
        return self.reason(cert) is not None

    def __bool__(self) -> bool:
        return bool(self.serials or self.common_names)


def _serial(value: int | str) -> int:
    """A serial as an int, or as hex the way `ctl cert show` prints it (colons allowed)."""
    if isinstance(value, int):
        return value
    text = value.strip().lower().replace(":", "").removeprefix("0x")
    try:
        return int(text, 16)
    except ValueError:
        raise PkiError(f"serial {value!r} is not a hexadecimal number") from None


def _load_chain(ctx: ssl.SSLContext, cert: PathLike, key: PathLike) -> None:
    for p in (cert, key):
        if not os.path.exists(p):
            raise PkiError(f"{p}: no such file; issue it with `llmgw ctl cert issue-server|issue-node`")
    try:
        ctx.load_cert_chain(os.fspath(cert), os.fspath(key))
    except ssl.SSLError as exc:
        raise PkiError(f"{cert} with {key}: not a certificate and its key ({exc.reason or exc})") from None


def _load_ca(ctx: ssl.SSLContext, ca: PathLike) -> None:
    if not os.path.exists(ca):
        raise PkiError(
            f"{ca}: no such file; it is the cluster CA's certificate (ca.pem), made by "
            "`llmgw ctl cert init-ca --dir DIR` and copied beside every certificate issued"
        )
    try:
        ctx.load_verify_locations(cafile=os.fspath(ca))
    except ssl.SSLError as exc:
        raise PkiError(f"{ca}: not a CA certificate ({exc.reason or exc})") from None
