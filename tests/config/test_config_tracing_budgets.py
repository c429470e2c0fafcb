"""tracing and budgets in server.yaml: `llmgw config check` names what is wrong and says what it takes."""

from __future__ import annotations

from llmgw.cli.main import main
from llmgw.config import parse_server_config


def check(tmp_path, capsys, text: str) -> tuple[int, list[str]]:
    path = tmp_path / "server.yaml"
    path.write_text(text)
    code = main(["config", "check", str(path)])
    _, err = capsys.readouterr()
    return code, [line.split(": ", 1)[1] for line in err.splitlines()]


def test_a_budget_share_outside_zero_to_one_or_twice_is_refused(tmp_path, capsys):
    code, problems = check(tmp_path, capsys, "budgets:\n  notify_at: [1.5, 0.8, 0.8]\n")
    assert code == 1
    assert problems == [
        "budgets.notify_at[0]: must be above 0 and below 1 (0.8 is 80% of the budget), got 1.5; "
        "a budget running out is told anyway",
        "budgets.notify_at[2]: 0.8 is given twice",
    ]


def test_tracing_needs_an_http_address_a_ratio_and_a_name(tmp_path, capsys):
    code, problems = check(tmp_path, capsys,
                           "tracing:\n  endpoint: collector:4318\n  sample_ratio: 1.5\n  service_name: ''\n")
    assert code == 1
    assert problems == [
        "tracing.endpoint: expected the collector's OTLP/HTTP address starting http:// or https://, "
        "got 'collector:4318'",
        "tracing.sample_ratio: must be from 0 to 1 (the share of traces kept), got 1.5",
        "tracing.service_name: empty; give the name spans are filed under, like llmgw",
    ]


def test_tracing_and_budget_events_are_off_unless_set():
    config = parse_server_config({})
    assert config.tracing.endpoint == "" and config.budgets.notify_at == []
    config = parse_server_config({"tracing": {"endpoint": "http://otel:4318", "headers": {"x-key": "k"}},
                                  "budgets": {"notify_at": [0.5, 0.9]}})
    assert config.tracing.headers["x-key"].reveal() == "k" and config.budgets.notify_at == [0.5, 0.9]
