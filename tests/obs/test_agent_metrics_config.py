"""agent.yaml metrics_listen: off when empty (the default), else a host:port, refused by name when it is not."""

import pytest

from llmgw.config.errors import ConfigError
from llmgw.config.load import parse_agent_config

BASE = {"node_id": "gpu-7", "control_planes": ["127.0.0.1:7443"], "insecure": True}


def test_metrics_listen_is_off_by_default_and_takes_a_host_and_port():
    assert parse_agent_config(BASE).metrics_listen == ""
    assert parse_agent_config({**BASE, "metrics_listen": ":9101"}).metrics_listen == ":9101"


def test_a_metrics_listen_that_is_no_address_is_refused_by_name():
    with pytest.raises(ConfigError) as caught:
        parse_agent_config({**BASE, "metrics_listen": "9101"})
    assert "metrics_listen: expected host:port" in str(caught.value)
    assert "leave it empty to serve none" in str(caught.value)
