"""router.tag_labels must be label names Prometheus takes, not the request metric's own, each named once."""

import pytest

from llmgw.config import parse_server_config
from llmgw.config.errors import ConfigError


@pytest.mark.parametrize("labels, said", [
    (["team-name"], "router.tag_labels[0]: 'team-name' cannot be a label name"),
    (["__team"], "cannot be a label name"),
    (["team", "model"], "router.tag_labels[1]: 'model' is already a label of llmgw_requests_total"),
    (["team", "team"], "'team' is named twice"),
])
def test_a_tag_label_prometheus_cannot_take_is_refused_by_name(labels, said):
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"router": {"tag_labels": labels}})
    assert said in str(caught.value)


def test_at_least_one_value_per_tag_label():
    with pytest.raises(ConfigError, match=r"router.tag_label_values: 0: give at least 1"):
        parse_server_config({"router": {"tag_labels": ["team"], "tag_label_values": 0}})
    assert parse_server_config({"router": {"tag_labels": ["team", "app"]}}).router.tag_labels == ["team", "app"]
