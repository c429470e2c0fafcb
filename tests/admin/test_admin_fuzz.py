"""Fuzzing the admin API with schemathesis against a live server (issue #17 items 4 and 7).

Every operation of the OpenAPI document gets bodies, paths and query strings
made from the document: data it allows (positive) and data it refuses
(negative). Whatever comes, no answer is a 5xx, every answer fits the
document, and every change that got past the token (POST, PUT, PATCH,
DELETE) is one event in the audit log, done or refused. Data the document
allows is never refused as invalid: the document says what the server
checks. Bounded by examples and derandomized, so a CI run is the same every
time.
"""

from __future__ import annotations

from collections import Counter

import pytest

from llmgw.admin.routes import openapi_document

from .conftest import QWEN

CHANGES = {"POST", "PUT", "PATCH", "DELETE"}
#: What the in-memory cluster (llmgw.admin.testing.FakeCluster) does not do, answered 501 as a control plane
#: without it would be: the bodies are still checked against the document first, which is what this fuzzes;
#: the real control plane's updates and canaries are tested in tests/control/test_rollout*.py.
UNSUPPORTED_BY_THE_FAKE = ("does not update models or run canaries",
                           "does not run upgrades")  # ctl upgrade: tests/upgrade/ runs the real one
#: What a schema-valid request may still be told: there is no such thing, or it is not in a state for that.
STATE_REFUSALS = {404, 409}


def fuzz(tmp_path, mode: str, examples: int, *, refused_as_invalid: list[str] | None = None) -> Counter:
    """Run every operation `examples` times in `mode`; the failures listed, the statuses counted."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error, response_schema_conformance

    from llmgw.admin.testing import FakeCluster, LiveAdmin

    schema = schemathesis.openapi.from_dict(openapi_document())
    failures: list[str] = []
    statuses: Counter = Counter()
    changes = 0
    with LiveAdmin(tmp_path, cluster=FakeCluster(models=[QWEN])) as live:
        auth = {"Authorization": f"Bearer {live.TOKEN}"}
        events_before = len(live.run(live.store.list_audit(limit=10_000)))
        for result in schema.get_all_operations():
            operation = result.ok()

            @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
            def check(case):
                nonlocal changes
                # A change without a body still says application/json (the server's defence against forms
                # posted from a browser; the document's description of the API says so).
                bodiless = case.method.upper() in CHANGES and case.media_type is None
                headers = {**auth, "Content-Type": "application/json"} if bodiless else auth
                response = case.call(base_url=live.url, headers=headers)
                statuses[response.status_code] += 1
                if case.method.upper() in CHANGES and response.status_code not in (401, 403):
                    changes += 1
                where = f"{case.method} {case.formatted_path}"
                if response.status_code == 501 and any(t in response.text for t in UNSUPPORTED_BY_THE_FAKE):
                    return
                if response.status_code >= 500:
                    failures.append(f"{where}: {response.status_code} {response.text[:300]}")
                if (refused_as_invalid is not None and 400 <= response.status_code < 500
                        and response.status_code not in STATE_REFUSALS):
                    # the whole answer: a refusal echoing a long value names its reason after it
                    refused_as_invalid.append(f"{where} {case.body!r:.200} {case.query!r:.100}: "
                                              f"{response.status_code} {response.text}")
                case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

            try:
                check()
            except Exception as exc:  # noqa: BLE001 - every operation is tried; failures listed at the end
                failures.append(f"{operation.label}: {str(exc)[:600]}")
        from llmgw.admin.handlers_kept import READ_ACTIONS  # kept requests: reads are audited too, not changes

        audit = live.run(live.store.list_audit(limit=10_000))
        events = len(audit) - events_before - sum(e.action in READ_ACTIONS for e in audit)
    assert not failures, "\n".join(failures[:20])
    assert events == changes, f"{changes} changes answered, {events} audit events written"
    return statuses


@pytest.mark.slow  # some 4 s: every operation of the document, twice
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_a_few_of_each_operation_no_server_error_and_every_change_audited(tmp_path, mode):
    fuzz(tmp_path, mode, 2)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_many_of_each_operation_no_server_error_and_every_change_audited(tmp_path, mode):
    statuses = fuzz(tmp_path, mode, 25)
    assert sum(n for s, n in statuses.items() if s < 300) > 0, statuses
#: Refusals of schema-valid data for rules the document states where JSON Schema cannot check them, each with
#: why; anything else fails. Each is a relation between two values, or the running configuration's.
UNSTATED = {
    # until comes after since: the parameter says so (x-llmgw-after); JSON Schema cannot compare two values.
    # A hold's end is to come (x-llmgw-after: now); JSON Schema cannot read the clock.
    "that time has passed": "a hold ending in the past",
    "must be after since": "until before since",
    # A duration setting's text adds up past its bounds (x-llmgw-seconds); JSON Schema cannot add it up.
    "is above the most allowed": "a duration setting's text above its maximum",
    "is below the least allowed": "a duration setting's text below its minimum",
    "longer than any span": "a duration setting's text past any span",
    # The bands are the running configuration's (x-llmgw-choices-from); GET /settings/{key} lists them.
    "admission.default_band: expected one of": "a band the configuration does not have",
    # A models[] entry's relations between fields and with the catalog (x-llmgw-rules, in words).
    "is more than max": "scaling.min above scaling.max",
    # server.yaml's models need a max of 1 or more; a run-time model's 0 stops it (the same class, two rules).
    "must be at least 1, or no replica would ever run": "a server.yaml model with scaling.max 0",
    "is less than the window's min": "a window's max below its min",
    "give the window some length": "a window from and to the same minute",
    "does not divide the replica's": "a parallel size that does not divide the cards",
    "they must be equal": "parallel sizes whose product is not the cards",
    "'s name too": "two profiles of one name",
    "names the model itself": "a fallback naming its own model",
    "no model is called": "a fallback naming a model not in the catalog",
    "already names": "a name or alias another model has",
    "at most 24h, got": "a prewarm written as text past 24h",
}


@pytest.mark.slow
def test_data_the_document_allows_is_not_refused_as_invalid(tmp_path):
    """A body, path and query the document allows gets no 4xx refusal but 404 and 409 (there is no such
    thing, or it is not in a state for that): the document says what the server checks."""
    refused: list[str] = []
    fuzz(tmp_path, "positive", 10, refused_as_invalid=refused)
    left = [r for r in refused if not any(known in r for known in UNSTATED)]
    assert not left, f"{len(left)} schema-valid requests refused:\n" + "\n".join(r[:600] for r in left[:30])
