"""Handler of the notification endpoint: send a test event to server.yaml's sinks and say how each answered."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.notify_types import NotifyTestResult, SinkAnswer


async def notify_test(call: Call) -> NotifyTestResult:
    """Send a `test` event to every sink of server.yaml's notify section, or to the one named, whatever events
    each takes, and wait for the answers: each sink's HTTP status, how long it took, how many tries, and why it
    failed. A sink that failed is answered here (ok false), not refused. 404 when no sink has the name given;
    409 when there are no sinks, or a sink's kind is not installed."""
    from llmgw.config.errors import ConfigError
    from llmgw.notify.notifier import UnknownSink, build_notifier

    admin = call.admin
    notifier = admin.notifier
    if notifier is None:
        try:
            notifier = build_notifier(admin.config)
        except ConfigError as exc:
            raise ApiError(409, f"server.yaml's notify section cannot be used: {exc}", exc.problems) from None
    name = call.body.sink or None
    if name:
        call.target = f"notify:{name}"
    try:
        event, answers = await notifier.probe(name, actor=call.actor)
    except UnknownSink as exc:
        raise ApiError(404 if name and notifier.enabled else 409, str(exc)) from None
    return NotifyTestResult(ok=all(a.ok for a in answers), event_id=event.id, sinks=[
        SinkAnswer(sink=a.sink, kind=a.kind, ok=a.ok, status=a.status, seconds=a.seconds, attempts=a.attempts,
                   error=a.error) for a in answers])
