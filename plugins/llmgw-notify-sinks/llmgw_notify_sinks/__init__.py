"""llmgw's own notification sinks: where events that need a person are sent.

- `webhook`: the event as JSON, with a timestamp and, when the sink has a
  secret, an HMAC-SHA256 signature in the headers (llmgw_notify_sinks.webhook);
- `slack`: the event in words, as a Slack incoming webhook's `text` and blocks;
- `email`: the event in words, mailed through server.yaml's `mail:` server
  (llmgw_notify_sinks.email), the portal's one mail queue and sender.

The first two give each try 10 s, and try three times in all, waiting 1 s then 2 s,
after a timeout, a connection failure or a 5xx; a 4xx is not tried again.
See docs/notifications.md.
"""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.types import Sink
from llmgw_notify_sinks.email import EmailSink
from llmgw_notify_sinks.http import RetryPolicy, safe_address
from llmgw_notify_sinks.slack import SlackSink, slack_body
from llmgw_notify_sinks.webhook import WebhookSink, sign

__all__ = ["EmailSink", "RetryPolicy", "SlackSink", "WebhookSink", "llmgw_notify_sinks", "safe_address", "sign", "slack_body"]


@hookimpl
def llmgw_notify_sinks() -> list[Sink]:
    """`webhook` (signed JSON), `slack` (an incoming webhook's text and blocks) and `email` (through mail:)."""
    return [WebhookSink(), SlackSink(), EmailSink()]
