"""The notifier: which sinks take an event, de-duplication, never waiting, logging and counting, refusals."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from llmgw.cli.main import main
from llmgw.config import ConfigError
from llmgw.notify import events
from llmgw.notify.notifier import Notifier, UnknownSink, build_notifier

from .conftest import fast_sinks, server_config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def parked(model: str = "qwen"):
    return events.model_parked(model, failures=3, node="node-a", reason="the engine exited")


def lost(node: str = "node-a"):
    return events.node_lost(node, silent_s=15.0, replicas=[("r1", "qwen")])


def notifier(config, **kw) -> Notifier:
    return Notifier(config.notify, fast_sinks(), source="cp-test", **kw)


async def delivered(n: Notifier) -> None:
    """Start `n` if needed, and wait until what it queued is sent."""
    await n.start()
    await asyncio.wait_for(n._queue.join(), 5)


async def test_an_event_reaches_every_sink_that_takes_its_kind(receiver):
    config = server_config({"url": receiver.url + "/all", "name": "all"},
                           {"url": receiver.url + "/nodes", "name": "nodes", "events": ["node_lost"]},
                           {"url": receiver.url + "/slack", "kind": "slack", "events": ["model_parked", "node_lost"]})
    n = notifier(config)
    assert n.emit(parked()) and n.emit(lost())
    assert n.emit(events.backup_failed("disk full"))  # only `all` takes it
    await delivered(n)
    await n.stop()
    assert [r.json()["kind"] for r in receiver.on("/all")] == ["model_parked", "node_lost", "backup_failed"]
    assert [r.json()["kind"] for r in receiver.on("/nodes")] == ["node_lost"]
    assert [r.json()["text"].split(":")[0] for r in receiver.on("/slack")] == ["Model parked", "Node lost"]
    body = receiver.on("/all")[0].json()
    assert body["source"] == "cp-test" and body["id"].startswith("evt-") and body["time"].endswith("Z")


async def test_a_sink_whose_events_leave_a_kind_out_never_gets_it(receiver):
    n = notifier(server_config({"url": receiver.url + "/nodes", "events": ["node_lost"]}))
    assert not n.emit(parked())  # no sink takes it: nothing is queued
    assert n._queue.qsize() == 0
    await n.stop()


async def test_the_same_event_about_the_same_thing_is_sent_once_within_repeat_after(receiver):
    clock = Clock()
    n = notifier(server_config({"url": receiver.url + "/hook"}, repeat_after="1h"), clock=clock)
    await n.start()
    try:
        assert n.emit(parked("qwen"))
        assert not n.emit(parked("qwen"))  # the same kind and subject
        assert n.emit(parked("llama"))  # another model
        assert n.emit(lost("qwen"))  # another kind
        clock.now += 3599
        assert not n.emit(parked("qwen"))
        clock.now += 2
        assert n.emit(parked("qwen"))  # an hour later: again
        await delivered(n)
    finally:
        await n.stop()
    assert [(r.json()["kind"], r.json()["subject"]) for r in receiver.received] == [
        ("model_parked", "qwen"), ("model_parked", "llama"), ("node_lost", "qwen"), ("model_parked", "qwen")]


async def test_repeat_after_zero_sends_every_one(receiver):
    n = notifier(server_config({"url": receiver.url + "/hook"}, repeat_after="0s"))
    assert n.emit(parked()) and n.emit(parked())
    await delivered(n)
    await n.stop()
    assert len(receiver.received) == 2


async def test_an_event_no_sink_took_is_not_held_back_by_the_de_duplication(receiver):
    n = notifier(server_config({"url": receiver.url + "/hook"}))
    receiver.answers = [400]
    assert n.emit(parked())
    await delivered(n)
    assert n.emit(parked())  # the first was refused: this one goes
    await delivered(n)
    await n.stop()
    assert [r.json()["kind"] for r in receiver.received] == ["model_parked", "model_parked"]


async def test_deliveries_are_counted_and_logged_without_the_address_or_the_secret(receiver, caplog):
    registry = CollectorRegistry()
    config = server_config({"url": receiver.url + "/services/T1/B1/the-slack-key", "kind": "slack"},
                           {"url": receiver.url + "/hook", "name": "ops", "secret": "the-signing-secret"})
    n = notifier(config, registry=registry)
    receiver.answers = [200, 404]  # the Slack sink's first answer, then ops's (they go at once: either order)
    with caplog.at_level(logging.DEBUG, logger="llmgw.notify"):
        n.emit(lost())
        await delivered(n)
        await n.stop()
    sent = registry.get_sample_value("llmgw_notifications_total",
                                     {"sink": "ops", "event": "node_lost", "outcome": "sent"}) or 0
    failed = registry.get_sample_value("llmgw_notifications_total",
                                       {"sink": "ops", "event": "node_lost", "outcome": "failed"}) or 0
    slack = f"sinks[0] ({receiver.url.removeprefix('http://')})"
    slack_any = sum(registry.get_sample_value("llmgw_notifications_total",
                                              {"sink": slack, "event": "node_lost", "outcome": o}) or 0
                    for o in ("sent", "failed"))
    assert sent + failed == 1 and slack_any == 1
    text = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert "notification sent" in text and "notification not delivered" in text
    assert "the-slack-key" not in text and "/services" not in text and "the-signing-secret" not in text


async def test_emit_never_waits_a_full_queue_drops_and_counts(receiver):
    registry = CollectorRegistry()
    n = notifier(server_config({"url": receiver.url + "/hook", "name": "ops"}, repeat_after="0s"),
                 registry=registry, queue_size=2)
    assert n.emit(parked("a")) and n.emit(parked("b"))
    assert not n.emit(parked("c"))  # not started, queue full: dropped at once
    assert registry.get_sample_value("llmgw_notifications_total",
                                     {"sink": "ops", "event": "model_parked", "outcome": "dropped"}) == 1
    await n.start()
    await n.stop()  # sends what is queued first
    assert [r.json()["subject"] for r in receiver.received] == ["a", "b"]


async def test_probe_sends_a_test_event_to_every_sink_or_the_one_named(receiver):
    config = server_config({"url": receiver.url + "/a", "name": "a", "events": ["node_lost"]},
                           {"url": receiver.url + "/b"})
    n = notifier(config)
    event, answers = await n.probe(actor="ann")
    assert event.kind == "test" and [a.sink for a in answers] == ["a", f"sinks[1] ({receiver.url[7:]})"]
    assert all(a.ok and a.status == 200 and a.attempts == 1 for a in answers)
    assert receiver.on("/a")[0].json()["details"] == {"asked_by": "ann"}
    _, [only] = await n.probe("sinks[1]")
    assert only.sink.startswith("sinks[1] (")
    with pytest.raises(UnknownSink, match="no sink is called 'c'; the sinks are: a, sinks"):
        await n.probe("c")
    with pytest.raises(UnknownSink, match="notify.sinks is empty"):
        await notifier(server_config()).probe()


def test_a_sink_of_a_kind_no_plugin_gives_is_refused_naming_the_key():
    config = server_config({"url": "https://hooks.example.com/a"}, {"url": "https://events.pagerduty.com/x",
                                                                      "kind": "slak"})
    with pytest.raises(ConfigError) as caught:
        build_notifier(config)
    [problem] = caught.value.problems
    assert problem.startswith("notify.sinks[1].kind: no notification sink of kind 'slak' is installed "
                              "(did you mean 'slack'?); the plugins loaded give: email, slack, webhook")
    assert build_notifier(server_config({"url": "https://a.example.com", "kind": "slack"})).enabled


def test_llmgw_server_refuses_such_a_file_at_start(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text("notify:\n  sinks:\n    - url: https://alerts.example.com/hook\n      kind: pagerduty\n")
    assert main(["server", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: notify.sinks[0].kind: no notification sink of kind 'pagerduty' is installed" in err
    assert "the plugins loaded give: email, slack, webhook" in err


def test_without_sinks_no_plugin_is_needed(monkeypatch):
    def no_plugins(*a, **kw):
        raise AssertionError("plugins loaded for a notify section without sinks")

    monkeypatch.setattr("llmgw.plugins.manager.load_plugins", no_plugins)
    n = build_notifier(server_config())
    assert not n.enabled and not n.emit(parked())


def test_a_sinks_address_can_come_from_the_environment_and_is_not_repeated_when_wrong(monkeypatch):
    from llmgw.config import ConfigError, parse_server_config

    monkeypatch.setenv("SLACK_HOOK", "https://hooks.slack.example/services/T/B/secretpart")
    config = parse_server_config({"notify": {"sinks": [{"url": "env:SLACK_HOOK", "kind": "slack"}]}})
    sink = config.notify.sinks[0]
    assert sink.url.reveal().endswith("/secretpart") and sink.url.origin == "env:SLACK_HOOK"
    monkeypatch.setenv("SLACK_HOOK", "hooks.slack.example/services/T/B/secretpart")
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"notify": {"sinks": [{"url": "env:SLACK_HOOK", "kind": "slack"}]}})
    text = str(caught.value) + " ".join(str(p) for p in caught.value.details)
    assert "notify.sinks[0].url" in text and "secretpart" not in text
