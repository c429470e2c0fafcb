"""Durations and sizes as operators write them, and as llmgw writes them back."""

import pickle
from datetime import timedelta

import pytest

from llmgw.config.units import ByteSize, Duration


@pytest.mark.parametrize(
    "written, seconds",
    [
        ("5s", 5),
        ("250ms", 0.25),
        ("30m", 1800),
        ("2160h", 2160 * 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("1d", 86400),
        ("500us", 0.0005),
        ("0", 0),
        (" 5s ", 5),
        ("-5s", -5),
        (90, 90),
        ("90", 90),
        (0.5, 0.5),
    ],
)
def test_durations_parse_to_seconds(written, seconds):
    assert Duration.parse(written).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize(
    "written, canonical",
    [
        ("5s", "5s"),
        (90, "1m30s"),
        ("1h30m", "1h30m"),
        ("2160h", "2160h"),
        ("1.5s", "1s500ms"),
        ("0", "0s"),
        ("1d", "24h"),
        ("-5s", "-5s"),
    ],
)
def test_a_duration_is_written_back_in_one_canonical_form_that_reads_the_same(written, canonical):
    duration = Duration.parse(written)
    assert str(duration) == canonical
    assert Duration.parse(str(duration)) == duration
    assert repr(duration) == f"Duration('{canonical}')"


@pytest.mark.parametrize("bad", ["five", "5 s", "5x", "h", "", "1h-5m", "--5s"])
def test_a_wrong_duration_says_what_is_expected_and_what_was_given(bad):
    with pytest.raises(ValueError) as exc:
        Duration.parse(bad)
    assert str(exc.value) == f"expected a duration like 5s, got {bad!r}"


@pytest.mark.parametrize(
    "bad, shown", [(True, "true"), (None, "nothing (null)"), ([5], "a list"), ({"s": 5}, "a mapping")]
)
def test_a_duration_of_the_wrong_kind_names_what_it_got(bad, shown):
    with pytest.raises(ValueError) as exc:
        Duration.parse(bad)
    assert str(exc.value) == f"expected a duration like 5s, got {shown}"


def test_a_duration_is_a_timedelta_and_pickles():
    duration = Duration.parse("1h")
    assert duration == timedelta(hours=1)
    assert duration > Duration.parse("59m")
    assert pickle.loads(pickle.dumps(duration)) == duration


@pytest.mark.parametrize(
    "written, number",
    [
        ("128MiB", 128 * 2**20),
        ("1GiB", 2**30),
        ("10Gi", 10 * 2**30),
        ("500MB", 500_000_000),
        ("64KB", 64_000),
        ("1048576", 1048576),
        (1048576, 1048576),
        ("1.5GiB", 1536 * 2**20),
        ("0", 0),
        ("2 MiB", 2 * 2**20),
    ],
)
def test_sizes_parse_to_bytes(written, number):
    assert ByteSize.parse(written) == number


@pytest.mark.parametrize(
    "number, canonical",
    [
        (128 * 2**20, "128MiB"),
        (2**30, "1GiB"),
        (500_000_000, "500MB"),
        (1234, "1234"),
        (0, "0"),
        (33554432, "32MiB"),
    ],
)
def test_a_size_is_written_back_in_one_canonical_form_that_reads_the_same(number, canonical):
    size = ByteSize(number)
    assert str(size) == canonical
    assert ByteSize.parse(str(size)) == size
    assert repr(size) == f"ByteSize('{canonical}')"
    assert int(size) == number


@pytest.mark.parametrize("bad", ["lots", "5XB", "MiB", "1,5GiB"])
def test_a_wrong_size_says_what_is_expected(bad):
    with pytest.raises(ValueError) as exc:
        ByteSize.parse(bad)
    assert str(exc.value) == f"expected a size like 128MiB, got {bad!r}"


def test_a_negative_size_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot be negative"):
        ByteSize.parse(-1)


@pytest.mark.parametrize("bad", [1e300, "99999999999999d", 10**20])
def test_a_duration_longer_than_any_span_is_refused_not_a_crash(bad):
    with pytest.raises(ValueError, match="longer than any span"):
        Duration.parse(bad)


def test_server_yaml_with_a_duration_longer_than_any_span_names_the_key():
    from llmgw.config import parse_server_config

    with pytest.raises(Exception) as refused:
        parse_server_config({"router": {"timeouts": {"total": "99999999999999d"}}})
    assert "router.timeouts.total" in str(refused.value) and "longer than any span" in str(refused.value)
