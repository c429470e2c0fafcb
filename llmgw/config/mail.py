"""server.yaml's `mail:` section: the SMTP server the portal's mail goes through (llmgw.mail)."""

from __future__ import annotations

from typing import Literal

import attrs

from llmgw.config.fields import setting
from llmgw.config.secrets import Secret
from llmgw.config.units import Duration

MailSecurity = Literal["starttls", "tls", "none"]


@attrs.frozen
class MailConfig:
    """Mail the portal sends (reset links, sign-up approvals, budget notices); off while host is empty."""

    host: str = setting("", doc="The SMTP server, like smtp.example.com; empty sends no mail.")
    port: int = setting(587, doc="Its port: 587 for STARTTLS, 465 for TLS from the start, 25 for neither.")
    security: MailSecurity = setting(
        "starttls", doc="starttls (upgrade the connection, refuse a server that cannot), tls (TLS from the first "
        "byte), or none (plain text: only to a relay on this machine or a trusted network).")
    username: str = setting("", doc="Who to sign in to the server as; empty signs in as no one.")
    password: Secret | None = setting(None, doc="The password for username: the value, env:NAME or file:/path.")
    from_: str = setting("", key="from", doc="The sender, like 'LLM gateway <llm@example.com>'.")
    portal_url: str = setting(
        "", doc="The portal's address the links in mail point at, like https://llm.example.com; never taken from "
        "a request.")
    retry_for: Duration = setting(
        Duration(hours=24), doc="How long a message the server refuses or cannot be reached for is tried again "
        "(waits of 1 minute, doubling up to an hour); then it is failed, for llmgw ctl mail to show.")
    ca_file: str = setting("", doc="A CA bundle (PEM) the server's certificate is checked against; empty uses the "
                           "system's.")
    timeout: Duration = setting(Duration(seconds=30), doc="How long one attempt may take, connecting included.")

    @property
    def enabled(self) -> bool:
        return bool(self.host)


def mail_problems(mail: MailConfig) -> list[tuple[tuple, str]]:
    """What is wrong with a `mail:` section that names a server, as (path under mail, message)."""
    import email.utils
    import os
    from urllib.parse import urlsplit

    if not mail.enabled:
        return []
    problems: list[tuple[tuple, str]] = []
    if not 1 <= mail.port <= 65535:
        problems.append((("port",), f"expected a port from 1 to 65535, got {mail.port}"))
    if "@" not in email.utils.parseaddr(mail.from_)[1]:
        problems.append((("from",), f"expected the sender's address, like 'LLM gateway <llm@example.com>', "
                                    f"got {mail.from_!r}"))
    parts = urlsplit(mail.portal_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        problems.append((("portal_url",), "expected the portal's address the links point at, like "
                                          f"https://llm.example.com, got {mail.portal_url!r}"))
    if mail.username and mail.password is None:
        problems.append((("password",), "empty, and username is set: give the password (env:NAME or file:/path)"))
    if mail.username and mail.security == "none":
        problems.append((("security",), "none would send the password in clear; use starttls or tls"))
    if mail.ca_file and not os.path.isfile(mail.ca_file):
        problems.append((("ca_file",), f"{mail.ca_file} is not a file"))
    return problems


#: The notify sink kind that mails events through `mail:` (llmgw_notify_sinks.email).
EMAIL_SINK = "email"


def mail_addresses(url: str) -> list[str]:
    """The addresses of an email sink's url, ``mailto:a@example.com,b@example.com``; ValueError when it is not one."""
    if not url.startswith("mailto:"):
        raise ValueError(f"expected mailto:ADDRESS[,ADDRESS…], got {url!r}")
    addresses = [a.strip() for a in url[len("mailto:"):].split(",") if a.strip()]
    if not addresses or any(a.count("@") != 1 or a.startswith("@") or a.endswith("@") or " " in a for a in addresses):
        raise ValueError(f"expected mailto:ADDRESS[,ADDRESS…] with whole addresses, got {url!r}")
    return addresses


def email_sink_problems(config) -> list[tuple[tuple, str]]:
    """notify.sinks of kind email: each a mailto: url, and mail: naming a server to send through."""
    problems: list[tuple[tuple, str]] = []
    for index, sink in enumerate(config.notify.sinks):
        if sink.kind != EMAIL_SINK:
            continue
        try:
            mail_addresses(sink.url.reveal())
        except ValueError as exc:
            problems.append((("notify", "sinks", index, "url"), str(exc)))
        if not config.mail.enabled:
            problems.append((("notify", "sinks", index, "kind"),
                             "email sends through server.yaml's mail: server, and mail.host is empty"))
    return problems
