"""The fast check of a body (the schema compiled by fastjsonschema) against jsonschema's walk: a body the
fast check lets through must be one jsonschema lets through, for every operation and field, or a refusal
would be lost."""

from __future__ import annotations

import itertools
import random

import pytest

from llmgw.router import request_schemas
from llmgw.router.request_schemas import SCHEMAS, _fits, _validator, problem_in

VALUES = [None, True, False, 0, 1, -1, 2, 16, 129, 1.0, 0.5, 2.5, -3.5, "", "x", "a" * 70, [], [1], ["a"],
          ["a"] * 5, [{}], [{"role": "user", "content": "hi"}], [{"type": "function"}],
          [{"type": "function", "function": {"name": ""}}], {}, {"a": 1}, {"k" * 70: "v"},
          {str(i): "v" for i in range(17)}, {"include_usage": "yes"}, {"include_usage": True}]


def _fields(schema: dict) -> list[str]:
    return sorted(set(schema.get("properties", {})) | set(schema.get("required", [])))


def _bodies(operation: str):
    schema = SCHEMAS[operation]
    rng = random.Random(operation)
    fields = _fields(schema)
    yield {}
    for field, value in itertools.product(fields, VALUES):
        yield {field: value}
    for _ in range(400):
        yield {field: rng.choice(VALUES) for field in rng.sample(fields, k=min(len(fields), rng.randint(1, 6)))}


@pytest.mark.parametrize("operation", sorted(SCHEMAS))
def test_the_fast_check_lets_through_only_what_jsonschema_does(operation):
    walked = _validator(operation)
    for body in _bodies(operation):
        if _fits(operation)(body):
            assert walked.is_valid(body), (operation, body)


@pytest.mark.parametrize("operation", sorted(SCHEMAS))
def test_a_refusal_reads_as_jsonschema_words_it(operation, monkeypatch):
    for body in itertools.islice(_bodies(operation), 200):
        quick = problem_in(operation, body)
        with monkeypatch.context() as m:
            m.setattr(request_schemas, "_fits", lambda _op: lambda _body: False)
            walked_only = problem_in(operation, body)
        assert quick == walked_only, (operation, body)
