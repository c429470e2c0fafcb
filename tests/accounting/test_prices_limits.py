"""Prices, and the RPM/TPM counters (no store needed)."""

from __future__ import annotations

import pytest

from llmgw.accounting.api import LimitExceeded
from llmgw.accounting.limits import RateLimiter
from llmgw.accounting.prices import ModelPrice, PriceBook, format_money, parse_money
from llmgw.auth.principal import ANONYMOUS, Principal
from llmgw.config import parse_server_config
from llmgw.store import Limits

from .conftest import Ticker

ENDPOINTS = [{"url": "http://engine:8000/v1"}]


def config_with_prices():
    return parse_server_config({
        "prices": {"currency": "EUR", "default": {"input": 0.5, "output": 1.5}},
        "models": [
            {"name": "big", "aliases": ["large"], "price": {"input": 3, "output": 15}, "endpoints": ENDPOINTS},
            {"name": "free", "price": {"input": 0, "output": 0}, "endpoints": ENDPOINTS},
            {"name": "plain", "endpoints": ENDPOINTS},
        ],
    })


def test_prices_per_model_alias_and_default() -> None:
    book = PriceBook.from_config(config_with_prices())
    assert book.currency == "EUR"
    # Per million tokens is micro-units per token.
    assert book.cost("big", 1_000_000, 0) == 3_000_000
    assert book.cost("large", 1000, 100) == 3000 + 1500
    assert book.cost("free", 10_000, 10_000) == 0
    assert book.cost("plain", 1000, 1000) == 500 + 1500
    assert book.cost("not-declared", 1000, 1000) == 2000
    assert book.cost("big", 0, 0) == 0
    # Rounded up: a single token of a priced model is never free.
    assert ModelPrice.per_million("0.1", "0.1").cost(1, 0) == 1
    assert ModelPrice.per_million(0.1, 0.2).cost(10, 10) == 3  # no float error: 1 + 2
    with pytest.raises(ValueError):
        ModelPrice.per_million(-1, 0)


def test_money_reads_and_prints_without_float_error() -> None:
    assert parse_money("12.50") == 12_500_000
    assert parse_money("$0.000001") == 1
    assert format_money(12_500_000, "USD") == "12.50 USD"
    assert format_money(125) == "0.000125"
    assert format_money(3_000_000) == "3.00"
    for bad in ("ten", "-1", "0.0000001", "nan"):
        with pytest.raises(ValueError, match="budget"):
            parse_money(bad)


def principal(*limits: Limits, key_id: str = "key-1", project_id: str = "prj-1") -> Principal:
    return Principal(
        key_id=key_id, key_prefix="llmgw-abcdef", key_name="", kind="service", org_id="org-1",
        team_id=None, project_id=project_id, user_id=None, band=None, allowed_models=None, limits=limits,
    )


def test_rpm_refuses_with_the_wait_until_a_request_fits(ticker: Ticker) -> None:
    rates = RateLimiter(monotonic=ticker)
    p = principal(Limits(scope_kind="key", scope_id="key-1", rpm=2))
    rates.admit(p, 10)
    rates.admit(p, 10)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(p, 10)
    assert (err.value.status, err.value.code, err.value.scope) == (429, "rate_limit_exceeded", "key:key-1")
    assert err.value.retry_after == pytest.approx(30.0)  # 2 a minute: one every 30 s
    assert "2 requests a minute" in err.value.message
    ticker.advance(29)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(p, 10)
    assert err.value.retry_after == pytest.approx(1.0)
    ticker.advance(1)
    rates.admit(p, 10)


def test_tpm_counts_the_estimate_then_the_real_use(ticker: Ticker) -> None:
    rates = RateLimiter(monotonic=ticker)
    p = principal(Limits(scope_kind="project", scope_id="prj-1", tpm=600))
    rules = rates.admit(p, 400)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(p, 300)
    assert err.value.code == "tokens_limit_exceeded" and err.value.scope == "project:prj-1"
    assert err.value.retry_after == pytest.approx(10.0)  # 100 tokens short at 10 a second
    rates.correct(rules, -300)  # it used 100 tokens, not 400
    rules = rates.admit(p, 300)
    rates.correct(rules, 500)  # ... and this one 800: the bucket goes into debt
    with pytest.raises(LimitExceeded) as err:
        rates.admit(p, 1)
    assert err.value.retry_after == pytest.approx(30.1)  # 100 + 800 of 600: 300 in debt
    # A prompt bigger than a whole minute's allowance never fits: no Retry-After.
    with pytest.raises(LimitExceeded) as err:
        rates.admit(p, 601)
    assert err.value.retry_after is None and "shorter prompt" in err.value.message


def test_each_level_narrows_the_one_above(ticker: Ticker) -> None:
    rates = RateLimiter(monotonic=ticker)
    org = Limits(scope_kind="org", scope_id="org-1", rpm=5)
    small = principal(org, Limits(scope_kind="project", scope_id="prj-1", rpm=2), key_id="k1", project_id="prj-1")
    other = principal(org, key_id="k2", project_id="prj-2")
    rates.admit(small, 0)
    rates.admit(small, 0)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(small, 0)
    assert err.value.scope == "project:prj-1"  # the project's limit bit first
    rates.admit(other, 0)
    rates.admit(other, 0)
    rates.admit(other, 0)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(other, 0)
    assert err.value.scope == "org:org-1"  # the organization counted both projects
    # A level cannot widen the one above: a project allowed 100 still stops at the org's 5.
    wide = principal(org, Limits(scope_kind="project", scope_id="prj-3", rpm=100), key_id="k3", project_id="prj-3")
    with pytest.raises(LimitExceeded) as err:
        rates.admit(wide, 0)
    assert err.value.scope == "org:org-1"


def test_a_refusal_takes_nothing_from_any_level(ticker: Ticker) -> None:
    rates = RateLimiter(monotonic=ticker)
    p = principal(Limits(scope_kind="org", scope_id="org-1", rpm=10),
                  Limits(scope_kind="key", scope_id="key-1", tpm=100))
    rates.admit(p, 100)
    for _ in range(5):
        with pytest.raises(LimitExceeded):
            rates.admit(p, 50)
    assert [h.remaining for h in rates.headroom(p)] == [9, 0]


def test_defaults_apply_to_a_key_without_limits_of_its_own(ticker: Ticker) -> None:
    rates = RateLimiter(default_rpm=1, default_tpm=1000, monotonic=ticker)
    bare = principal()
    rates.admit(bare, 10)
    with pytest.raises(LimitExceeded) as err:
        rates.admit(bare, 10)
    assert err.value.scope == "key:key-1"
    own = principal(Limits(scope_kind="key", scope_id="key-2", rpm=3), key_id="key-2")
    for _ in range(3):
        rates.admit(own, 10)
    assert [(r.what, r.limit) for r in rates.rules(own)] == [("rpm", 3), ("tpm", 1000)]
    for _ in range(100):
        rates.admit(ANONYMOUS, 10_000)  # no key, no defaults
