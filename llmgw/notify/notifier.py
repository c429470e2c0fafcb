"""The notifier: takes events where they happen and delivers them to server.yaml's sinks, in the background.

`emit(event)` never waits: it picks the sinks whose `events` take the
event's kind (empty takes every kind), drops the event when one of the same
kind about the same subject was taken less than `notify.repeat_after` ago,
stamps it (time, this control plane's name, an id) and queues it. A task
started with the server sends each queued event to its sinks at once, each
through its kind's plugin (llmgw.plugins.types.Sink: the plugin times out,
retries and answers how it went), logs every delivery's outcome and counts
it in `llmgw_notifications_total{sink,event,outcome}`. When every sink failed
the event is forgotten by the de-duplication, so the next one of its kind
and subject is tried again rather than held back for `repeat_after`.

Logs name a sink by its `name`, else by `sinks[N]` and its host: never by its
whole address (a Slack webhook's path is its key), never with its secret.

`probe(name)` (`llmgw ctl notify test`) sends a `test` event to every sink,
or the one named, whatever their `events`, and waits for the answers.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

import aiohttp
import attrs
from prometheus_client import CollectorRegistry, Counter

from llmgw.config.errors import ConfigError, Problem
from llmgw.config.server import NotifyConfig, NotifySink, ServerConfig
from llmgw.notify.events import TEST, Event, probe
from llmgw.obs import logs
from llmgw.plugins.types import Delivery, Sink, SinkTarget
from llmgw.tasks import cancel_and_wait

__all__ = ["Answer", "Notifier", "Target", "UnknownSink", "build_notifier", "check_sink_kinds", "installed_sinks",
           "sink_label"]

log = logs.get("llmgw.notify")

#: Events waiting to be sent; past this an event is dropped (and counted), never waited for.
QUEUE_SIZE = 1000
#: At shutdown, how long events still queued may take to go out.
FLUSH_S = 5.0
#: (kind, subject) pairs remembered for de-duplication before the old ones are forgotten.
_REMEMBERED = 10_000


class UnknownSink(LookupError):
    """`llmgw ctl notify test --sink NAME` names no sink (or server.yaml has none)."""


def _host(url: str) -> str:
    return urlsplit(url).netloc.rpartition("@")[2] or "no address"


def sink_label(index: int, sink: NotifySink) -> str:
    """What logs, metrics and `ctl notify test` call a sink: its name, else `sinks[N] (host)`."""
    return sink.name or f"sinks[{index}] ({_host(sink.url.reveal())})"


@attrs.frozen
class Target:
    """One configured sink, with the plugin that delivers to it."""

    index: int
    label: str
    kind: str
    events: frozenset[str]  #: the kinds it takes; empty: every kind
    sink: Sink = attrs.field(repr=False)
    target: SinkTarget = attrs.field(repr=False)

    def accepts(self, kind: str) -> bool:
        return kind == TEST or not self.events or kind in self.events


@attrs.frozen
class Answer:
    """How one sink took one event."""

    sink: str  #: its label
    kind: str  #: webhook, slack, ...
    ok: bool
    status: int | None
    seconds: float
    attempts: int
    error: str


def check_sink_kinds(notify: NotifyConfig, kinds: Iterable[str]) -> list[Problem]:
    """A problem for each sink whose kind no loaded plugin gives."""
    import difflib

    known = sorted(kinds)
    problems = []
    for index, sink in enumerate(notify.sinks):
        if sink.kind in known:
            continue
        close = difflib.get_close_matches(sink.kind, known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        problems.append(Problem(
            ("notify", "sinks", index, "kind"),
            f"no notification sink of kind {sink.kind!r} is installed{hint}; the plugins loaded give: "
            f"{', '.join(known) or 'none'} (`llmgw plugins` lists them; install the plugin that adds it, "
            "or check LLMGW_PLUGINS)"))
    return problems


def installed_sinks(config: ServerConfig, plugins=None, *, source_file: str = "server.yaml") -> dict[str, Sink]:
    """The sink plugins by kind (`plugins`, loaded here when not given and a sink needs one); ConfigError,
    naming `notify.sinks[N].kind`, when a sink's kind is not among them. `llmgw server` calls it at start."""
    if not config.notify.sinks:
        return {}
    if plugins is None:
        from llmgw.plugins.manager import load_plugins

        plugins = load_plugins()
    sinks = plugins.sinks()
    problems = check_sink_kinds(config.notify, sinks)
    if problems:
        raise ConfigError(problems, source_file)
    return sinks


def build_notifier(config: ServerConfig, plugins=None, *, registry: CollectorRegistry | None = None,
                   source: str | None = None, source_file: str = "server.yaml") -> Notifier:
    """The notifier for `config.notify`; ConfigError when a sink's kind is not installed (`installed_sinks`)."""
    sinks = installed_sinks(config, plugins, source_file=source_file)
    return Notifier(config.notify, sinks, registry=registry, source=source)


class Notifier:
    def __init__(
        self,
        config: NotifyConfig,
        sinks: Mapping[str, Sink],
        *,
        registry: CollectorRegistry | None = None,
        source: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        problems = check_sink_kinds(config, sinks)
        if problems:
            raise ConfigError(problems)
        self.repeat_after = config.repeat_after.total_seconds()
        self.targets = [
            Target(index=i, label=sink_label(i, s), kind=s.kind, events=frozenset(s.events), sink=sinks[s.kind],
                   target=SinkTarget(name=sink_label(i, s), url=s.url.reveal(),
                                     secret=s.secret.reveal() if s.secret is not None else None))
            for i, s in enumerate(config.sinks)
        ]
        #: the control plane events are said to come from
        self.source = source or socket.gethostname()
        self.clock = clock
        self.wall_clock = wall_clock
        self.deliveries = Counter(
            "llmgw_notifications", "Notifications by sink, event and outcome (sent, failed, dropped).",
            ["sink", "event", "outcome"], registry=registry if registry is not None else CollectorRegistry())
        self._last: dict[tuple[str, str, object], float] = {}
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def enabled(self) -> bool:
        """Whether server.yaml names any sink."""
        return bool(self.targets)

    # ---------------------------------------------------------------- taking events

    def emit(self, event: Event) -> bool:
        """Queue `event` for its sinks; never waits. False when no sink takes it, one like it went out
        less than repeat_after ago, or the queue is full."""
        targets = [t for t in self.targets if t.accepts(event.kind)]
        if not targets:
            return False
        # A budget's 80% and its refusal are two events about one subject: the threshold tells them apart.
        key = (event.kind, event.subject, event.details.get("threshold"))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_after:
            logs.event(log, "notification not repeated", logging.DEBUG, event=event.kind, subject=event.subject,
                       sent_s_ago=round(now - last, 1))
            return False
        try:
            self._queue.put_nowait(self._stamp(event))
        except asyncio.QueueFull:
            for t in targets:
                self.deliveries.labels(t.label, event.kind, "dropped").inc()
            logs.event(log, "notification dropped: too many waiting", logging.WARNING, event=event.kind,
                       subject=event.subject, waiting=self._queue.qsize())
            return False
        if len(self._last) >= _REMEMBERED:
            self._last = {k: t for k, t in self._last.items() if now - t < self.repeat_after}
        self._last[key] = now
        return True

    def _stamp(self, event: Event) -> Event:
        return attrs.evolve(event, time=event.time or self.wall_clock(), source=event.source or self.source,
                            id=event.id or f"evt-{secrets.token_hex(8)}")

    # ---------------------------------------------------------------- delivering

    async def start(self) -> None:
        if self._task is not None and not self._task.done():
            return
        self._session = aiohttp.ClientSession(trust_env=True)  # HTTPS_PROXY is honoured: Slack is outside
        self._task = asyncio.create_task(self._run(), name="llmgw-notify")

    async def stop(self, flush_s: float = FLUSH_S) -> None:
        """Send what is queued (for up to `flush_s` seconds), then stop."""
        task, self._task = self._task, None
        if task is not None and not task.done() and self._queue.qsize():
            try:
                async with asyncio.timeout(flush_s):
                    await self._queue.join()
            except TimeoutError:
                logs.event(log, "notifications left unsent at shutdown", logging.WARNING,
                           waiting=self._queue.qsize())
        await cancel_and_wait(task)
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                answers = await self.deliver(event, [t for t in self.targets if t.accepts(event.kind)])
                if answers and not any(a.ok for a in answers):
                    # the next one like it is tried again
                    self._last.pop((event.kind, event.subject, event.details.get("threshold")), None)
            except Exception:
                log.exception("notification not sent", extra={"fields": {"event": event.kind}})
            finally:
                self._queue.task_done()

    async def deliver(self, event: Event, targets: Iterable[Target]) -> list[Answer]:
        """Send `event` to each of `targets` at once; how each answered, in their order."""
        targets = list(targets)
        if not targets:
            return []
        if self._session is not None and not self._session.closed:
            return list(await asyncio.gather(*(self._send(t, event, self._session) for t in targets)))
        async with aiohttp.ClientSession(trust_env=True) as session:
            return list(await asyncio.gather(*(self._send(t, event, session) for t in targets)))

    async def _send(self, t: Target, event: Event, session: aiohttp.ClientSession) -> Answer:
        started = time.monotonic()
        try:
            delivery = await t.sink.send(t.target, event, session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a sink plugin's fault is that sink's failed delivery
            text = f"{type(exc).__name__}: {exc}".replace(t.target.url, f"the {t.kind} address")
            if t.target.secret:
                text = text.replace(t.target.secret, "***")
            delivery = Delivery(ok=False, error=f"the {t.kind} sink failed: {text}",
                                seconds=time.monotonic() - started)
        answer = Answer(sink=t.label, kind=t.kind, ok=delivery.ok, status=delivery.status,
                        seconds=round(delivery.seconds, 3), attempts=delivery.attempts, error=delivery.error)
        self.deliveries.labels(t.label, event.kind, "sent" if answer.ok else "failed").inc()
        fields = {"sink": t.label, "kind": t.kind, "event": event.kind, "subject": event.subject,
                  "event_id": event.id, "status": answer.status, "attempts": answer.attempts,
                  "seconds": answer.seconds}
        if answer.ok:
            logs.event(log, "notification sent", **fields)
        else:
            logs.event(log, "notification not delivered", logging.WARNING, **fields, error=answer.error)
        return answer

    # ---------------------------------------------------------------- ctl notify test

    def find(self, name: str | None = None) -> list[Target]:
        """Every sink, or the one `name` names (its name, or `sinks[N]`); UnknownSink if none.

        Not by its address: the name asked for goes into the audit log, and a Slack address is a key."""
        if not self.targets:
            raise UnknownSink("server.yaml's notify.sinks is empty: there is no sink to test; add one "
                              "(docs/notifications.md)")
        if not name:
            return list(self.targets)
        found = [t for t in self.targets if name in (t.label, f"sinks[{t.index}]")]
        if not found:
            raise UnknownSink(f"no sink is called {name!r}; the sinks are: "
                              f"{', '.join(t.label for t in self.targets)}")
        return found

    async def probe(self, name: str | None = None, *, actor: str = "") -> tuple[Event, list[Answer]]:
        """Send a `test` event to every sink, or the one named (UnknownSink: none), and wait for the answers."""
        targets = self.find(name)
        event = self._stamp(probe(actor))
        return event, await self.deliver(event, targets)
