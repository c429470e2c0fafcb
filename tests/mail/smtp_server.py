"""An SMTP server the mail tests run (aiosmtpd): plain, or STARTTLS with a password, keeping what it is sent."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import socket
import ssl
from email.message import EmailMessage
from pathlib import Path

import attrs
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
import ipaddress


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "smtp.crt", folder / "smtp.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@attrs.define
class Inbox:
    messages: list[EmailMessage] = attrs.Factory(list)
    logins: list[str] = attrs.Factory(list)
    refuse: int | None = None  # answer every message with this code (550: for good)

    async def handle_DATA(self, server, session, envelope) -> str:
        if self.refuse is not None:
            return f"{self.refuse} 5.1.1 refused by the test server"
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"


class SMTPServer:
    """`start()` listens on `port`; with `cert` it offers STARTTLS, requires it, and requires a password."""

    USER, PASSWORD = "gateway", "s3cret-pass"

    def __init__(self, *, port: int | None = None, cert: tuple[Path, Path] | None = None,
                 implicit_tls: bool = False) -> None:
        self.port = port or free_port()
        self.inbox = Inbox()
        self.cert = cert
        self.implicit_tls = implicit_tls  # TLS from the first byte (port 465's way), not STARTTLS
        self.controller: Controller | None = None

    def _auth(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login.decode(), auth_data.password.decode()) == (
            self.USER, self.PASSWORD)
        if ok:
            self.inbox.logins.append(auth_data.login.decode())
        return AuthResult(success=ok)

    def start(self) -> SMTPServer:
        kw: dict = {}
        if self.cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, self.cert))
            kw = {"authenticator": self._auth, "auth_required": True, "auth_require_tls": True}
            if self.implicit_tls:
                # aiosmtpd counts only STARTTLS as TLS for AUTH; this connection is TLS from its first byte.
                kw.update(ssl_context=context, auth_require_tls=False)
            else:
                kw.update(tls_context=context, require_starttls=True)
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port, **kw)
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
