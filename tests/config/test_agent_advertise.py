"""agent_advertise (or LLMGW_AGENT_ADVERTISE in its place): what agents are told to dial, checked as HOST:PORT."""

import pytest

from llmgw.config import ConfigError, parse_server_config
from llmgw.config.advertise import ADVERTISE_ENV, configured_advertise


@pytest.fixture(autouse=True)
def no_variable(monkeypatch):
    monkeypatch.delenv(ADVERTISE_ENV, raising=False)


def problems(mapping):
    with pytest.raises(ConfigError) as exc:
        parse_server_config({"agent_insecure": True, **mapping})
    return exc.value.problems


@pytest.mark.parametrize("address", ["cp1.example.com:7443", "203.0.113.10:30743", "[2001:db8::1]:7443",
                                     "llmgw-agents-0.llmgw.svc:7443"])
def test_a_host_and_port_is_taken(address):
    config = parse_server_config({"agent_insecure": True, "agent_advertise": address})
    assert config.agent_advertise == address
    assert configured_advertise(config) == address


def test_empty_is_the_default_and_names_nothing():
    config = parse_server_config({"agent_insecure": True})
    assert config.agent_advertise == "" and configured_advertise(config) == ""


@pytest.mark.parametrize("address, says", [
    ("cp1.example.com", "expected host:port"),
    (":7443", "names no host"),
    ("0.0.0.0:7443", "names no host"),
    ("2001:db8::1:7443", "IPv6 address in brackets"),
    ("cp_1.example.com:7443", "neither an IP address nor a DNS name"),
    ("cp1.example.com:70000", "expected host:port"),
])
def test_what_is_not_a_dialable_host_and_port_is_refused_by_name(address, says):
    (problem,) = problems({"agent_advertise": address})
    assert problem.startswith("agent_advertise:") and says in problem, problem


def test_the_variable_is_used_instead_of_the_file(monkeypatch):
    monkeypatch.setenv(ADVERTISE_ENV, "cp2.example.com:30744")
    config = parse_server_config({"agent_insecure": True, "agent_advertise": "cp1.example.com:7443"})
    assert configured_advertise(config) == "cp2.example.com:30744"


def test_an_empty_variable_leaves_the_file_s(monkeypatch):
    monkeypatch.setenv(ADVERTISE_ENV, "")
    config = parse_server_config({"agent_insecure": True, "agent_advertise": "cp1.example.com:7443"})
    assert configured_advertise(config) == "cp1.example.com:7443"


def test_a_bad_variable_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv(ADVERTISE_ENV, "not an address")
    (problem,) = problems({})
    assert problem.startswith("agent_advertise:") and ADVERTISE_ENV in problem and "unset it" in problem, problem


def test_llmgw_server_refuses_to_start_on_a_bad_variable_and_says_which(monkeypatch, tmp_path, capsys):
    from llmgw.cli.main import main

    config = tmp_path / "server.yaml"
    config.write_text(f'agent_insecure: true\nstore: {{dsn: "sqlite:///{tmp_path}/store.db"}}\n'
                      f'admin_token_file: "{tmp_path}/admin-token"\n')
    monkeypatch.setenv(ADVERTISE_ENV, "llmgw-0")
    assert main(["server", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "agent_advertise: environment variable LLMGW_AGENT_ADVERTISE" in err and "'llmgw-0'" in err
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "admin-token").exists()  # nothing started
