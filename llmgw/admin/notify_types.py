"""What the notification endpoint reads and answers: a test event sent to server.yaml's sinks."""

from __future__ import annotations

import attrs

from llmgw.admin.fields import field


@attrs.frozen(kw_only=True)
class NotifyTestRequest:
    """The body of POST /notify/test; empty tests every sink."""

    sink: str | None = field(
        "The sink to test: its name, or `sinks[N] (host)` for one without a name; null or left out tests every "
        "sink.", None)


@attrs.frozen(kw_only=True)
class SinkAnswer:
    """How one sink took the test event."""

    sink: str = field("The sink: its name, or `sinks[N] (host)` for one without a name.")
    kind: str = field("Its kind: webhook, slack, or a kind a plugin adds.")
    ok: bool = field("Whether it took the event (answered 2xx).")
    status: int | None = field("The HTTP status of its last answer; null when none came (a timeout, a refused "
                               "connection).", None)
    seconds: float = field("From the first try to the last answer, waits between tries included.")
    attempts: int = field("Tries made: a timeout, a connection failure or a 5xx is tried again, a 4xx is not.")
    error: str = field("Why it was not delivered; empty when it was.", "")


@attrs.frozen(kw_only=True)
class NotifyTestResult:
    """The answer of POST /notify/test."""

    ok: bool = field("Whether every sink tested took the event.")
    event_id: str = field("The test event's id, as the webhook's body and X-Llmgw-Event-Id carry it.")
    sinks: list[SinkAnswer] = field("Each sink tested, in server.yaml's order.")
