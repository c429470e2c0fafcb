"""`webhook`: each event POSTed as JSON, signed with HMAC-SHA256 when the sink has a secret.

Every request carries:

- `X-Llmgw-Event`: the event's kind, like `model_parked`;
- `X-Llmgw-Event-Id`: the event's id, the same in every retry;
- `X-Llmgw-Timestamp`: when this try was sent, in seconds since 1970 (UTC);
- `X-Llmgw-Signature: sha256=HEX` when the sink has a secret: HMAC-SHA256,
  keyed with the secret, of the timestamp, a dot, and the body's bytes.

A receiver recomputes the signature from the raw body and the timestamp
header, compares it in constant time, and refuses a timestamp more than a
few minutes old (a replayed request). docs/notifications.md has the code.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import aiohttp

from llmgw.plugins.types import Delivery, Event, Sink, SinkTarget
from llmgw_notify_sinks.http import DEFAULT_POLICY, USER_AGENT, RetryPolicy, post

__all__ = ["EVENT_HEADER", "ID_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "WebhookSink", "sign"]

EVENT_HEADER = "X-Llmgw-Event"
ID_HEADER = "X-Llmgw-Event-Id"
TIMESTAMP_HEADER = "X-Llmgw-Timestamp"
SIGNATURE_HEADER = "X-Llmgw-Signature"


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=` and the hex HMAC-SHA256 of `timestamp.body`, keyed with `secret`."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookSink(Sink):
    name = "webhook"
    description = "POSTs each event as JSON, signed (HMAC-SHA256) when the sink has a secret"

    def __init__(self, policy: RetryPolicy = DEFAULT_POLICY, clock=time.time) -> None:
        self.policy = policy
        self.clock = clock

    def body(self, event: Event) -> bytes:
        return json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":")).encode()

    async def send(self, target: SinkTarget, event: Event, session: aiohttp.ClientSession) -> Delivery:
        body = self.body(event)

        def headers() -> dict[str, str]:
            timestamp = str(int(self.clock()))
            out = {"Content-Type": "application/json", "User-Agent": USER_AGENT, EVENT_HEADER: event.kind,
                   ID_HEADER: event.id, TIMESTAMP_HEADER: timestamp}
            if target.secret:
                out[SIGNATURE_HEADER] = sign(target.secret, timestamp, body)
            return out

        return await post(session, target.url, body, headers, self.policy)
