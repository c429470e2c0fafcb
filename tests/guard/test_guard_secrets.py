"""Secrets: every issuer's key shape, JWTs, PEM blocks and llmgw's own keys."""

import base64
import json

import pytest
from llmgw_guard_detectors import secrets as S

RANDOM = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY"  # 32 url-safe characters, letters and digits


def jwt(header: dict, payload: dict) -> str:
    def part(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part(header)}.{part(payload)}.c2lnbmF0dXJlLWJ5dGVz"


SECRETS = [
    ("openai_key", "sk-" + RANDOM + "abcdefghijklmnop"),
    ("openai_key", "sk-proj-" + RANDOM + RANDOM),
    ("anthropic_key", "sk-ant-api03-" + RANDOM + RANDOM + "-xyz_AA"),
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_access_key", "ASIAY34FZKBOKMUTVV7A"),
    ("github_token", "ghp_" + RANDOM + "abcd"),
    ("github_token", "gho_" + RANDOM + "wxyz"),
    ("github_token", "ghs_" + RANDOM + "1234"),
    ("github_token", "github_pat_11ABCDEFG0123456789_" + RANDOM + RANDOM),
    ("slack_token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack_token", "xoxp-1234567890-abcdefghij"),
    ("slack_webhook", "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("google_api_key", "AIzaSyD" + RANDOM[:32]),
    ("jwt", jwt({"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "x"})),
    ("llmgw_key", S.LLMGW_KEY_PREFIX + RANDOM),
]


@pytest.mark.parametrize("kind,secret", SECRETS)
def test_secret_found_where_it_is(secrets, spans, kind, secret):
    text = f"my key is {secret} ok"
    assert spans(secrets, text) == [(kind, secret)]
    [f] = secrets.find(text)
    assert f.category == "secret" and secret not in f.detail


@pytest.mark.parametrize("kind,secret", SECRETS)
def test_secret_inside_base64_is_found(secrets, kind, secret):
    blob = base64.b64encode(f"config: {secret}".encode()).decode()
    text = f"here: {blob}"
    found = [f for f in secrets.find(text) if f.kind == kind]
    assert found and text[found[0].start:found[0].end] == blob


@pytest.mark.parametrize("text", [
    "sk-this-is-not-a-real-key-at-all",  # prose with hyphens: no digits
    "task-" + RANDOM,  # "sk-" inside a word
    "sk-ant-short1",
    "AKIA1234",  # too short
    "XAKIAIOSFODNN7EXAMPLE",  # continues a word
    "ghp_short123",
    "xoxq-1234567890-abcdefghij",  # not a Slack token type
    "AIzaShort123",
    "eyJub3QiOiJhIGhlYWRlciJ9.eyJzdWIiOiIxIn0.sig",  # header without "alg"
    "ey" + "A" * 30 + ".bbbbbb.cccc",  # header is not JSON
    "llmgw-short1",
    "llmgw-" + "a" * 30,  # no digits: a word, not a key
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END CERTIFICATE-----",
])
def test_not_a_secret(secrets, text):
    assert secrets.find(text) == []


def test_llmgw_key_prefix_is_a_constant():
    assert S.LLMGW_KEY_PREFIX == "llmgw-"


@pytest.mark.parametrize("label", ["RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "", "PGP "])
def test_pem_private_key_block(secrets, spans, label):
    block = "BLOCK" if label == "PGP " else ""
    tail = f" {block}" if block else ""
    pem = (f"-----BEGIN {label}PRIVATE KEY{tail}-----\nMIIEpAIBAAKCAQEA7bq98xyzABCDEF\nQWERTYUIOPasdfghjkl123456==\n"
           f"-----END {label}PRIVATE KEY{tail}-----")
    text = f"my key:\n{pem}\nthanks"
    assert spans(secrets, text) == [("private_key", pem)]


def test_pem_private_key_cut_short(secrets, spans):
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
    text = f"{pem}\n\nwhy does this fail?"
    assert spans(secrets, text) == [("private_key", pem)]


def test_pem_in_a_json_string_with_escaped_newlines(secrets, spans):
    pem = r"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    text = '{"key": "' + pem + '"}'
    assert spans(secrets, text) == [("private_key", pem)]


def test_fullwidth_key_found_at_its_place(secrets, spans):
    wide = "".join(chr(ord(c) + 0xFEE0) for c in "AKIAIOSFODNN7EXAMPLE")
    assert spans(secrets, f"key {wide}!") == [("aws_access_key", wide)]


def test_key_split_by_zero_width_characters(secrets, spans):
    key = "ghp_" + RANDOM[:16] + "\u200b" + RANDOM[16:] + "abcd"
    assert spans(secrets, f"token={key}") == [("github_token", key)]


def test_many_keys_in_one_text(secrets):
    text = " ".join(s for _, s in SECRETS)
    assert sorted(f.kind for f in secrets.find(text)) == sorted(k for k, _ in SECRETS)
