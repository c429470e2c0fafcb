"""Handing a message to the SMTP server: smtplib, in a worker thread.

`security` starttls upgrades the connection and refuses a server that cannot
(a password never crosses in clear); tls speaks TLS from the first byte; none
is plain text. The server's certificate is checked against the system's CAs,
or `mail.ca_file`. A refusal says whether trying again may help.
"""

from __future__ import annotations

import asyncio
import email.utils
import smtplib
import ssl
from email.message import EmailMessage

from llmgw.config.mail import MailConfig

#: SMTP answers that say the message itself will never be taken (a bad address, a policy): not retried.
#: 530/534/535 (authentication) are the sender's setup, fixed by an operator: retried.
_SETUP_CODES = frozenset({530, 534, 535})


class MailRefused(Exception):
    """The server did not take a message; `retry` says whether a later attempt may succeed."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class SMTPSender:
    def __init__(self, config: MailConfig) -> None:
        self.config = config

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.config.ca_file or None)
        return context

    def message(self, to: str, subject: str, body: str) -> EmailMessage:
        msg = EmailMessage()
        msg["From"] = self.config.from_
        msg["To"] = to
        msg["Subject"] = subject
        msg["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
        domain = email.utils.parseaddr(self.config.from_)[1].rpartition("@")[2] or None
        msg["Message-ID"] = email.utils.make_msgid(domain=domain)
        msg["Auto-Submitted"] = "auto-generated"
        msg.set_content(body)
        return msg

    async def send(self, to: str, subject: str, body: str) -> None:
        """Hand one message over; MailRefused when it was not taken."""
        msg = self.message(to, subject, body)
        await asyncio.get_running_loop().run_in_executor(None, self._send, msg)

    def _send(self, msg: EmailMessage) -> None:
        c = self.config
        timeout = max(1.0, c.timeout.total_seconds())
        try:
            if c.security == "tls":
                server: smtplib.SMTP = smtplib.SMTP_SSL(c.host, c.port, timeout=timeout, context=self._tls())
            else:
                server = smtplib.SMTP(c.host, c.port, timeout=timeout)
            with server:
                server.ehlo()
                if c.security == "starttls":
                    if not server.has_extn("starttls"):
                        raise MailRefused(f"{c.host}:{c.port} offers no STARTTLS; set mail.security: tls for a "
                                          "TLS port, or none for a trusted relay", retry=True)
                    server.starttls(context=self._tls())
                    server.ehlo()
                if c.username:
                    server.login(c.username, c.password.reveal() if c.password is not None else "")
                server.send_message(msg)
        except MailRefused:
            raise
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            raise MailRefused(f"the server refused the recipient ({', '.join(map(str, codes))})",
                              retry=not any(500 <= code < 600 for code in codes)) from None
        except smtplib.SMTPResponseException as exc:
            text = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else exc.smtp_error
            permanent = 500 <= exc.smtp_code < 600 and exc.smtp_code not in _SETUP_CODES
            raise MailRefused(f"the server answered {exc.smtp_code} {text}"[:300], retry=not permanent) from None
        except (OSError, smtplib.SMTPException) as exc:  # cannot connect, TLS, a dropped connection
            raise MailRefused(f"{c.host}:{c.port}: {exc.__class__.__name__}: {exc}"[:300], retry=True) from None
