"""Host names and addresses as others dial them: whether a text is an IP address or a DNS name, and how a
host is written inside a URL or a HOST:PORT (an IPv6 address in brackets)."""

from __future__ import annotations

import ipaddress
import re

__all__ = ["is_host", "url_host"]

_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def is_host(text: str) -> bool:
    """An IP address (brackets taken off) or a DNS name of letters, digits and hyphens (a final dot allowed)."""
    text = text.strip().strip("[]")
    if not text:
        return False
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    return len(text) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in labels)


def url_host(host: str) -> str:
    """`host` as written before `:PORT` or in a URL: an IPv6 address in brackets, anything else as it is."""
    host = host.strip().strip("[]")
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host
