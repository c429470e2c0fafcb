"""The forms of text the admin API takes, as JSON Schema keywords for `field(schema=...)` and path parameters.

Each says in the OpenAPI document what the server checks (the store's
names and ids, a duration, a time, a path in the organization tree), so a
client that keeps to the document is not refused for the form of a value;
it may still be told 404 or 409 for what the store holds. Some are a little
narrower than the server (it trims spaces the pattern does not allow), never
looser. `x-form` says the form in words: a refusal quotes it
(llmgw.admin.body_schema).
"""

from __future__ import annotations

from typing import Any

#: No control characters (the store refuses them in every name, id and label).
_PLAIN = r"\x00-\x1f\x7f"
#: What Python's str.strip() takes off and its \s matches, spelled out (so every regex engine agrees).
_SPACE = r" \t\n\r\f\v\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: Text without control characters, not only white space.
_WORD = rf"[^{_PLAIN}]*[^{_PLAIN}{_SPACE}][^{_PLAIN}]*"
#: One name of the organization tree: as _WORD, and no '/'.
_NAME = rf"[^{_PLAIN}/]*[^{_PLAIN}/{_SPACE}][^{_PLAIN}/]*"

#: Text that may be empty, without control characters.
TEXT: dict[str, Any] = {"x-form": "text without control characters", "pattern": rf"^[^{_PLAIN}]*$"}
#: An id or a label: not empty, not blank, no control characters, at most 128 characters.
ID: dict[str, Any] = {
    "x-form": "an id or a label: not empty, no control characters",
    "pattern": rf"^{_WORD}$", "maxLength": 128}
#: A name people give (a key's, a node's): at most 100 characters, no control characters.
NAME: dict[str, Any] = {
    "x-form": "a name without control characters (newlines, tabs)",
    "pattern": rf"^[^{_PLAIN}]*$", "maxLength": 100}
#: ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT, each name at most 100 characters.
ORG_PATH: dict[str, Any] = {
    "x-form": "a path: ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT",
    "pattern": rf"^{_NAME}(/{_NAME}){{0,2}}$", "maxLength": 303}
_EMAIL = rf"[^@{_SPACE}{_PLAIN}]+@[^@{_SPACE}{_PLAIN}]+"
#: An email address as the store keeps it: name@domain, no spaces.
EMAIL: dict[str, Any] = {
    "x-form": "an address like name@example.com",
    "pattern": rf"^{_EMAIL}$", "maxLength": 254}
#: A person: their email (what has an '@' is read as one) or their id (usr-…).
_PERSON = rf"({_EMAIL}|[^{_PLAIN}@]*[^{_PLAIN}{_SPACE}@][^{_PLAIN}@]*)"
PERSON: dict[str, Any] = {"x-form": "a person's email or id", "pattern": rf"^{_PERSON}$", "maxLength": 254}

_TREE = rf"{_NAME}(/{_NAME}){{0,2}}"
#: org:NAME, team:ORG/TEAM or project:PATH.
TREE_SCOPE: dict[str, Any] = {
    "x-form": "a scope: org:NAME, team:ORG/TEAM or project:PATH",
    "pattern": rf"^(org|team|project):{_TREE}$"}
#: As TREE_SCOPE, or user:EMAIL-OR-ID, key:ID.
SCOPE: dict[str, Any] = {
    "x-form": "a scope: org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL or key:ID",
    "pattern": rf"^((org|team|project):{_TREE}|user:{_PERSON}|key:{_WORD})$"}
#: Groups for the usage export: a list of them, each at most once, written separated by commas (the query
#: parameter's style form, explode false: by=project,model), or empty for none.
GROUPS: dict[str, Any] = {
    "x-form": "groups among org, team, project, user, key, model, separated by commas, each once",
    "type": "array", "items": {"enum": ["org", "team", "project", "user", "key", "model"]}, "uniqueItems": True}
#: One group for the usage report, or none.
GROUP: dict[str, Any] = {"x-form": "one of org, team, project, user, key, model or none (one group at a time)",
                         "pattern": "^(org|team|project|user|key|model|none)$"}

_AMOUNT = r"[0-9]{1,5}(\.[0-9]{1,3})?"
_DURATION = rf"({_AMOUNT}(us|µs|ms|s|m|h|d)){{1,4}}"
#: A span of time: 30s, 90m, 24h, 7d, 1h30m (or a bare number of seconds).
DURATION: dict[str, Any] = {
    "x-form": "a duration like 30s, 90m, 24h, 7d or 1h30m",
    "pattern": rf"^({_DURATION}|[0-9]{{1,9}})$"}
#: A span of time longer than nothing: as DURATION, not 0.
POSITIVE_DURATION: dict[str, Any] = {
    "x-form": "a duration longer than 0, like 30s, 90m, 24h, 7d or 1h30m",
    "pattern": rf"^(?=.*[1-9])({_DURATION}|[0-9]{{1,9}})$"}
#: A join code's life: 1 minute to 7 days, in minutes, hours or days.
JOIN_TTL: dict[str, Any] = {
    "x-form": "a time between 1m and 7d, in minutes, hours or days (30m, 1h, 2d)",
    "pattern": r"^([1-9][0-9]{0,3}m|[1-9][0-9]?h|1[0-5][0-9]h|16[0-8]h|[1-7]d)$"}
_DATE = r"(197[1-9]|19[89][0-9]|[2-8][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
_CLOCK = r"([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?"
#: A time: a date, an ISO 8601 time in UTC, or a span back from now (24h, 7d).
WHEN: dict[str, Any] = {
    "x-form": "a time; give 2026-09-01, 2026-09-01T12:00:00Z, or a span back from now like 24h or 7d",
    "pattern": rf"^({_DATE}(T{_CLOCK}Z?)?|[0-9]{{1,4}}(\.[0-9]{{1,3}})?(s|m|h|d))$"}
#: A replica's id, like qwen-small-3f9a1c2e (llmgw.control.node_logs checks the same).
REPLICA_ID: dict[str, Any] = {
    "x-form": "a replica id; `llmgw ctl replicas` lists them",
    "pattern": r"^([A-Za-z0-9][A-Za-z0-9._:@-]{0,127})?$"}


def duration_text(signs: str = "+") -> str:
    """The pattern of Duration.parse's text (llmgw.config.units): amounts with units (1h30m, 250ms) or a bare
    number of seconds, spaces around, one sign of `signs` before."""
    amount = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    return rf"^[{_SPACE}]*[{signs}]?(({amount}(us|µs|ms|s|m|h|d))+|{amount})[{_SPACE}]*$"


class Param(str):
    """A path parameter's description that carries its schema: `{"node": Param("The node's id.", ID)}`."""

    schema: dict[str, Any]

    def __new__(cls, doc: str, schema: dict[str, Any] | None = None) -> Param:
        made = super().__new__(cls, doc)
        made.schema = dict(schema or {})
        return made


__all__ = ["duration_text", "DURATION", "EMAIL", "GROUP", "GROUPS", "ID", "JOIN_TTL", "NAME", "ORG_PATH", "PERSON",
           "POSITIVE_DURATION", "Param", "REPLICA_ID", "SCOPE", "TEXT", "TREE_SCOPE", "WHEN"]
