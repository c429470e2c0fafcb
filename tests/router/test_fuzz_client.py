"""Fuzzing the client API (issue #17 item 7): every endpoint, OpenAI's shapes and Anthropic's, through a real gateway.

Bodies are nearly right with random values (tests/router/fuzzing.py): text
with control characters and lone surrogates, wrong types, huge numbers,
long and deeply nested values, JSON cut short or not UTF-8, and random
headers. Whatever comes, the gateway never answers 5xx, and every answer of
an endpoint that runs a model (chat, completions, embeddings, responses,
messages) is a usage row in the store once the writer has flushed: the same
request ids, no more, no fewer.

Bounded by examples and derandomized, so a run in CI is the same every time:
a few examples per endpoint in the default suite, many more in the slow one.
"""

from __future__ import annotations

import time
from collections import Counter
import urllib.parse

import requests
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from . import fuzzing as f

FAST_EXAMPLES = 12
SLOW_EXAMPLES = 250


def bounded(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    gw = f.FuzzedGateway().start(tmp_path_factory.mktemp("fuzz"))
    yield gw
    gw.close()


@pytest.fixture
def client(fuzzed):
    with Session(fuzzed.url) as http:
        yield http


class Answers:
    """What the gateway answered: no 5xx, and the request ids of the metered answers."""

    def __init__(self, gw: f.FuzzedGateway) -> None:
        self.gw = gw
        self.before = gw.usage_ids() if gw else set()
        self.metered: set[str] = set()
        self.count = 0
        self.statuses: Counter[int] = Counter()

    def saw(self, path: str, response: requests.Response, sent: object = None) -> None:
        self.count += 1
        self.statuses[response.status_code] += 1
        assert response.status_code < 500, (
            f"{response.request.method} {path} answered {response.status_code}: {response.text[:500]}\n"
            f"sent: {sent!r:.2000}")
        if path in f.METERED:
            rid = response.headers.get("x-llmgw-request-id")
            assert rid, f"{path} {response.status_code}: no x-llmgw-request-id"
            self.metered.add(rid)

    def rows_match(self, timeout: float = 10.0) -> None:
        """Every metered answer is one usage row, and no row is of anything else."""
        end = time.monotonic() + timeout
        while True:
            self.gw.flush()
            new = self.gw.usage_ids() - self.before
            if new == self.metered or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert self.metered - new == set(), f"answered without a usage row: {sorted(self.metered - new)[:5]}"
        assert new - self.metered == set(), f"rows of no answer: {sorted(new - self.metered)[:5]}"


class Session(requests.Session):
    """requests with the gateway's address in front of every path, and a timeout."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def request(self, method, path, **kw):  # type: ignore[override]
        return super().request(method, self.base + path, timeout=30, **kw)


def auth(headers: dict, anthropic: bool) -> dict:
    key = {"x-api-key": "sk-a"} if anthropic else {"Authorization": "Bearer sk-a"}
    return {**{k: v for k, v in headers.items()}, **key}


def post_json(client: Session, answers: Answers, path: str, body, how: str, headers: dict) -> None:
    sent = f.encode(body, how)
    response = client.post(path, data=sent, headers=auth({"Content-Type": "application/json", **headers},
                                                            path.startswith("/v1/messages")))
    answers.saw(path, response, sent)


def fuzz_json_endpoint(path: str, examples: int):
    @bounded(examples)
    @given(body=f.BODIES[path], how=f.encodings, headers=f.headers)
    @example(body=f.ANSWERED.get(path, {}), how="escaped", headers={})
    def run(client, answers, body, how, headers):
        post_json(client, answers, path, body, how, headers)

    def test(fuzzed, client):
        answers = Answers(fuzzed)
        run(client, answers)
        assert answers.count >= examples // 2
        if path in f.ANSWERED:  # a body the engine answered is among them
            assert answers.statuses[200] >= 1, sorted(answers.statuses.items())
        answers.rows_match()

    return test


for _path in f.BODIES:
    _name = _path.strip("/").replace("/", "_")
    globals()[f"test_fuzz_{_name}"] = fuzz_json_endpoint(_path, FAST_EXAMPLES)
    globals()[f"test_fuzz_{_name}_many"] = pytest.mark.slow(fuzz_json_endpoint(_path, SLOW_EXAMPLES))


# ---------------------------------------------------------------- files, models, lookups by id

ids = st.one_of(st.sampled_from(["file-0", "resp_0", "batch_0", "", ".", "..", "%2e%2e"]), f.text)
queries = st.dictionaries(st.sampled_from(["purpose", "limit", "after", "order", "x", "after_id", "before_id"]),
                          st.one_of(f.header_text, st.integers(-10, 10 ** 20).map(str)), max_size=3)
lookups = st.sampled_from([
    ("GET", "/v1/models"), ("GET", "/v1/files"), ("GET", "/v1/files/{}"), ("GET", "/v1/files/{}/content"),
    ("DELETE", "/v1/files/{}"), ("GET", "/v1/responses/{}"), ("DELETE", "/v1/responses/{}"),
    ("GET", "/v1/batches"), ("GET", "/v1/batches/{}"), ("POST", "/v1/batches/{}/cancel"), ("GET", "/v1/me"),
    ("GET", "/v1/models/{}"), ("GET", "/v1/responses/{}/input_items"), ("GET", "/v1/messages/batches"),
    ("GET", "/v1/messages/batches/{}"), ("POST", "/v1/messages/batches/{}/cancel"),
    ("GET", "/v1/messages/batches/{}/results"), ("DELETE", "/v1/messages/batches/{}"),
])


def fuzz_lookups(examples: int):
    @bounded(examples)
    @given(route=lookups, thing=ids, query=queries, headers=f.headers)
    def run(client, answers, route, thing, query, headers):
        method, template = route
        path = template.format(urllib.parse.quote(thing.encode("utf-8", "surrogatepass"), safe=""))
        response = client.request(method, path, params=query, headers=auth(headers, False))
        answers.saw(template, response, (path, query))

    def test(fuzzed, client):
        answers = Answers(fuzzed)
        run(client, answers)
        answers.rows_match()

    return test


test_fuzz_lookups = fuzz_lookups(FAST_EXAMPLES * 2)
test_fuzz_lookups_many = pytest.mark.slow(fuzz_lookups(SLOW_EXAMPLES))

uploads = st.fixed_dictionaries({
    "purpose": st.one_of(st.sampled_from(["batch", "batch_output", "assistants", ""]), f.text),
    "filename": f.text,
    "content": st.one_of(
        st.lists(f.json_values, max_size=4).map(lambda vs: "\n".join(f.encode(v, "escaped").decode() for v in vs)),
        f.text).map(lambda t: t.encode("utf-8", "surrogatepass")),
}, optional={"expires_after[anchor]": st.sampled_from(["created_at", "x"]) | f.text,
             "expires_after[seconds]": st.one_of(st.integers(-10, 10 ** 12).map(str), f.text)})


def fuzz_uploads(examples: int):
    @bounded(examples)
    @given(form=uploads, headers=f.headers)
    def run(client, answers, form, headers):
        fields = {k: (None, v.encode("utf-8", "surrogatepass")) for k, v in form.items()
                  if k not in ("filename", "content")}
        filename = form["filename"].encode("utf-8", "replace").decode("utf-8")  # what a client library can send
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        response = client.post("/v1/files", files={**fields, "file": (filename, form["content"])},
                               headers=auth(headers, False))
        answers.saw("/v1/files", response, form)

    def test(fuzzed, client):
        answers = Answers(fuzzed)
        run(client, answers)
        answers.rows_match()

    return test


test_fuzz_file_uploads = fuzz_uploads(FAST_EXAMPLES)
test_fuzz_file_uploads_many = pytest.mark.slow(fuzz_uploads(SLOW_EXAMPLES))


audio_forms = st.fixed_dictionaries({
    "content": st.binary(max_size=2048),
    "filename": f.text,
}, optional={"model": st.sampled_from(["m", "m", "rr"]) | f.text, "language": f.text, "prompt": f.any_text,
             "response_format": st.sampled_from(["json", "text", "srt", "x"]) | f.text,
             "temperature": st.one_of(st.floats(-2, 3).map(str), f.text), "stream": st.sampled_from(["true", "no"])})


def fuzz_audio(examples: int):
    @bounded(examples)
    @given(form=audio_forms, path=st.sampled_from(["/v1/audio/transcriptions", "/v1/audio/translations"]),
           headers=f.headers)
    def run(client, answers, form, path, headers):
        fields = {k: (None, v.encode("utf-8", "surrogatepass")) for k, v in form.items()
                  if k not in ("filename", "content")}
        filename = form["filename"].encode("utf-8", "replace").decode("utf-8")
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        response = client.post(path, files={**fields, "file": (filename, form["content"])},
                               headers=auth(headers, False))
        answers.saw(path, response, form)

    def test(fuzzed, client):
        answers = Answers(fuzzed)
        run(client, answers)
        answers.rows_match()

    return test


test_fuzz_audio_uploads = fuzz_audio(FAST_EXAMPLES)
test_fuzz_audio_uploads_many = pytest.mark.slow(fuzz_audio(SLOW_EXAMPLES))


def test_a_lone_surrogate_in_user_or_metadata_user_id_is_a_400_naming_the_field(fuzzed, client):
    """The case issue #17 found: it was a 500 (the body could not be encoded for the engine)."""
    answers = Answers(fuzzed)
    cases = [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "a\ud800"},
         "user"),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                          "metadata": {"user_id": "\udfff"}}, "metadata.user_id"),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x\udbffy"}]},
         "messages[0].content"),
    ]
    for path, body, field in cases:
        response = client.post(path, data=f.encode(body, "escaped"),
                               headers=auth({"Content-Type": "application/json"}, path == "/v1/messages"))
        answers.saw(path, response, body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert field in error["message"] and "surrogate" in error["message"]
        if path != "/v1/messages":
            assert error["param"] == field and error["code"] == "invalid_encoding"
    # A pair (an emoji as JSON escapes) is text like any other.
    response = client.post("/v1/chat/completions", headers=auth({}, False), data=f.encode(
        {"model": "m", "messages": [{"role": "user", "content": "\U0001f600"}], "user": "\U0001f600"}, "escaped"))
    answers.saw("/v1/chat/completions", response)
    assert response.status_code == 200, response.text
    answers.rows_match()
