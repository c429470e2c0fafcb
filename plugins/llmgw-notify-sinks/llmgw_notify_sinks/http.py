"""Posting one event to one address: a timeout per try, a few tries, a growing wait between them.

What a second try may fix is tried again: no answer in time, a connection
refused or cut, a 5xx. What it will not fix is not: a 4xx (a wrong address,
a revoked Slack webhook, a receiver refusing the signature) or a redirect
(a signed body is not sent on to an address nobody configured).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import aiohttp
import attrs

import llmgw
from llmgw.plugins.types import Delivery

__all__ = ["USER_AGENT", "RetryPolicy", "post", "safe_address"]

USER_AGENT = f"llmgw/{llmgw.__version__}"
#: How much of a refusal's body is kept in the error: enough for Slack's "invalid_payload".
_ANSWER_CHARS = 200


@attrs.frozen
class RetryPolicy:
    """How hard one delivery tries."""

    attempts: int = 3  #: tries in all
    backoff: float = 1.0  #: seconds before the second try; doubled before each one after
    timeout: float = 10.0  #: seconds one try may take, connecting included


#: Three tries of 10 s at most, 1 s and then 2 s apart.
DEFAULT_POLICY = RetryPolicy()


def safe_address(url: str) -> str:
    """The address as logs and errors may show it: scheme and host, never the path (a Slack key is there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.netloc else "(no address)"


def _scrub(text: str, url: str) -> str:
    """`text` without the address's path, query or user: aiohttp's errors may quote the whole URL."""
    parts = urlsplit(url)
    for secret in {url, parts.path, parts.query, parts.netloc.rpartition("@")[0]}:
        if secret and secret != "/":
            text = text.replace(secret, "…")
    return text


async def post(session: aiohttp.ClientSession, url: str, body: bytes,
               headers: Callable[[], Mapping[str, str]], policy: RetryPolicy = DEFAULT_POLICY) -> Delivery:
    """POST `body` to `url`, trying again after a timeout, a connection failure or a 5xx.

    `headers` is called before each try, so a signature can carry that try's time."""
    started = time.monotonic()
    status: int | None = None
    error = ""
    attempt = 0
    timeout = aiohttp.ClientTimeout(total=policy.timeout)
    for attempt in range(1, max(1, policy.attempts) + 1):
        try:
            async with session.post(url, data=body, headers=dict(headers()), timeout=timeout,
                                    allow_redirects=False) as response:
                status = response.status
                answer = (await response.content.read(_ANSWER_CHARS * 4)).decode("utf-8", "replace")
            if 200 <= status < 300:
                return Delivery(ok=True, status=status, attempts=attempt, seconds=time.monotonic() - started)
            said = " ".join(answer.split())[:_ANSWER_CHARS]
            error = f"answered {status}" + (f": {_scrub(said, url)}" if said else "")
            if status < 500:
                break  # a refusal or a redirect: the same request would get the same answer
        except TimeoutError:
            status, error = None, f"no answer within {policy.timeout:g} s"
        except aiohttp.ClientError as exc:
            status, error = None, _scrub(f"{type(exc).__name__}: {exc}", url)
        except OSError as exc:
            status, error = None, _scrub(f"{type(exc).__name__}: {exc.strerror or exc}", url)
        if attempt < policy.attempts:
            await asyncio.sleep(policy.backoff * 2 ** (attempt - 1))
    return Delivery(ok=False, status=status, error=error, attempts=attempt, seconds=time.monotonic() - started)
