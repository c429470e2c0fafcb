"""`slack`: each event in words, POSTed to a Slack incoming webhook (`text` and a few blocks).

`text` is what Slack shows in a notification and where blocks are not
drawn; the blocks give a title, the summary, the details one per line and,
in small print, what it is about, which control plane saw it and when.
Slack does not check signatures of incoming webhooks: the address is the
key, so a `secret` on a Slack sink is not used.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from llmgw.plugins.types import Delivery, Event, Sink, SinkTarget
from llmgw_notify_sinks.http import DEFAULT_POLICY, USER_AGENT, RetryPolicy, post

__all__ = ["TITLES", "SlackSink", "slack_body"]

TITLES = {
    "model_parked": "Model parked",
    "node_lost": "Node lost",
    "budget_spent": "Budget spent",
    "model_update_available": "Model update available",
    "backup_failed": "Backup failed",
    "test": "Test notification",
}
# Slack's own limits on a header and on a section's text.
_HEADER_CHARS = 150
_SECTION_CHARS = 3000


def _escape(text: str) -> str:
    """Slack's mrkdwn treats &, < and > as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def slack_body(event: Event) -> dict[str, Any]:
    """The incoming webhook's body for `event`."""
    title = TITLES.get(event.kind, event.kind.replace("_", " ").capitalize())
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:_HEADER_CHARS]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _escape(event.summary)[:_SECTION_CHARS]}},
    ]
    lines = [f"*{_escape(str(k))}*: {_escape(_value(v))}" for k, v in event.details.items()]
    if lines:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:_SECTION_CHARS]}})
    when = event.time.strftime("%Y-%m-%d %H:%M:%S UTC") if event.time is not None else ""
    context = " · ".join(_escape(p) for p in (event.subject, event.source, when) if p) + f" · `{event.kind}`"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    return {"text": f"{title}: {event.summary}", "blocks": blocks}


class SlackSink(Sink):
    name = "slack"
    description = "POSTs each event in words to a Slack incoming webhook"

    def __init__(self, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.policy = policy

    async def send(self, target: SinkTarget, event: Event, session: aiohttp.ClientSession) -> Delivery:
        body = json.dumps(slack_body(event), ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        return await post(session, target.url, body, lambda: headers, self.policy)
