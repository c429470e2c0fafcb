"""Loading server.yaml and agent.yaml: defaults, types, and every problem named with its place."""

import textwrap

import pytest

from llmgw.config import (
    AgentConfig,
    ByteSize,
    ConfigError,
    Duration,
    Secret,
    ServerConfig,
    dump_server_config,
    load_agent_config,
    load_server_config,
    make_converter,
    parse_server_config,
)


def write(tmp_path, text, name="server.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(mapping, **kwargs):
    with pytest.raises(ConfigError) as exc:
        parse_server_config(mapping, **kwargs)
    return exc.value.problems


# ---------------------------------------------------------------- defaults and values


def test_an_empty_file_is_every_default(tmp_path):
    config = load_server_config(write(tmp_path, ""))
    assert config == ServerConfig()
    assert config.listen == ":8080"
    assert config.admin_listen == "127.0.0.1:9090"
    assert config.metrics_listen == ":9091"
    assert config.agent_listen == ":7443"
    assert config.router.timeouts.dial == Duration(seconds=5)
    assert config.accounting.usage_retention == Duration(hours=2160)
    assert config.store.backend == "sqlite"
    assert [band.name for band in config.admission.bands] == ["gold", "silver", "bronze"]


def test_values_are_read_into_their_types(tmp_path):
    path = write(
        tmp_path,
        """\
        listen: "0.0.0.0:8000"
        store:
          dsn: postgres://llmgw:pw@db:5432/llmgw
          pool_max: 20
        router:
          max_body_bytes: 64MiB
          timeouts: {dial: 250ms, total: 1h30m}
          trusted_proxies: [10.0.0.0/8]
        models:
          - name: qwen
            class: critical
            engine: llamacpp
            scaling: {min: 0, max: 3, on_demand: true, idle_timeout: 10m}
            price: {input: 0.1, output: 0.4}
            profiles:
              - {name: cpu, cores: 8, memory: 4GiB, env: {OMP_NUM_THREADS: 8}, node_selector: {llmgw.io/rack: r1}}
        """,
    )
    config = load_server_config(path)
    assert config.listen == "0.0.0.0:8000"
    assert config.store.backend == "postgres"
    assert config.store.pool_max == 20
    assert config.router.max_body_bytes == 64 * 2**20
    assert isinstance(config.router.max_body_bytes, ByteSize)
    assert config.router.timeouts.dial.total_seconds() == 0.25
    assert config.router.timeouts.total == Duration(minutes=90)
    assert config.router.timeouts.first_byte == Duration(seconds=120)  # untouched keys keep defaults
    model = config.models[0]
    assert model.class_ == "critical"
    assert model.scaling.on_demand and model.scaling.max == 3
    assert model.price.output == 0.4
    profile = model.profiles[0]
    assert profile.memory == 4 * 2**30
    assert profile.env == {"OMP_NUM_THREADS": "8"}  # a number where a string goes is its text
    assert profile.node_selector == {"llmgw.io/rack": "r1"}
    assert config.model("qwen") is model


def test_a_section_with_every_key_commented_out_is_its_defaults(tmp_path):
    path = write(tmp_path, "router:\n  # timeouts:\n  #   dial: 1s\nmodels:\n")
    config = load_server_config(path)
    assert config.router == ServerConfig().router
    assert config.models == []


def test_secrets_resolve_from_the_environment_and_stay_hidden(tmp_path):
    path = write(
        tmp_path,
        """\
        models:
          - name: gpt
            endpoints:
              - url: https://api.openai.com/v1
                api_key: env:TEST_OPENAI_KEY
        """,
    )
    config = load_server_config(path, environ={"TEST_OPENAI_KEY": "sk-abc"})
    key = config.models[0].endpoints[0].api_key
    assert isinstance(key, Secret) and key.reveal() == "sk-abc"
    assert "sk-abc" not in repr(config)
    assert "sk-abc" not in dump_server_config(config)


def test_a_secret_file_is_read_beside_the_configuration(tmp_path):
    (tmp_path / "dsn").write_text("postgres://u:p@db/llmgw\n")
    config = load_server_config(write(tmp_path, "store: {dsn: 'file:dsn'}\n"))
    assert config.store.dsn.reveal() == "postgres://u:p@db/llmgw"
    assert config.store.backend == "postgres"


def test_the_agent_file(tmp_path):
    path = write(
        tmp_path,
        """\
        node_id: gpu01
        control_planes: [https://10.0.0.140:7443, "10.0.0.150:7443"]
        labels: {llmgw.io/row: 12}
        heartbeat_interval: 2s
        """,
        name="agent.yaml",
    )
    config = load_agent_config(path)
    assert isinstance(config, AgentConfig)
    assert config.node_id == "gpu01"
    assert config.control_planes == ["https://10.0.0.140:7443", "10.0.0.150:7443"]
    assert config.labels == {"llmgw.io/row": "12"}
    assert config.heartbeat_interval.total_seconds() == 2
    assert config.tls.cert == "/etc/llmgw/tls/node.pem"


def test_a_dump_reads_back_to_the_same_configuration():
    config = parse_server_config(
        {"router": {"timeouts": {"dial": "1s"}}, "models": [{"name": "m", "engine": "sim", "profiles": [{}]}]}
    )
    from ruamel.yaml import YAML

    again = parse_server_config(
        YAML(typ="rt").load(dump_server_config(config).replace("'***'", "/var/lib/llmgw/llmgw.db"))
    )
    assert again == config


def test_each_converter_is_its_own():
    assert make_converter() is not make_converter()


# ---------------------------------------------------------------- wrong types and keys


def test_a_wrong_duration_names_its_key():
    assert problems({"router": {"timeouts": {"dial": "five"}}}) == [
        "router.timeouts.dial: expected a duration like 5s, got 'five'"
    ]


def test_a_wrong_integer_deep_in_a_list_names_its_place():
    models = [{"name": f"m{i}", "engine": "sim", "profiles": [{}]} for i in range(3)]
    models[2]["profiles"] = [{"gpus": "two"}]
    assert problems({"models": models}) == ["models[2].profiles[0].gpus: expected an integer, got 'two'"]


def test_a_misspelt_key_is_named_with_the_key_meant():
    assert problems({"store": {"dnss": "x"}}) == ["store.dnss: unknown key (did you mean 'dsn'?)"]
    assert problems({"lisen": ":80"}) == ["lisen: unknown key (did you mean 'listen'?)"]


def test_a_key_at_the_wrong_level_says_where_it_goes():
    assert problems({"router": {"dial": "5s"}}) == [
        "router.dial: unknown key here (did you mean router.timeouts.dial?)"
    ]


def test_an_agent_key_in_server_yaml_says_which_file_it_belongs_in():
    assert problems({"control_planes": []}) == ["control_planes: unknown key (it belongs in agent.yaml)"]


def test_an_unknown_key_with_nothing_like_it_lists_the_keys_there():
    (problem,) = problems({"store": {"zzz": 1}})
    assert problem == "store.zzz: unknown key; the keys here are dsn, pool_min, pool_max"


def test_every_problem_is_reported_at_once():
    found = problems(
        {
            "store": {"dnss": "x"},
            "auth": {"keys_required": "yes"},
            "router": {"timeouts": {"dial": "five"}, "trusted_proxies": "10.0.0.1"},
            "models": [{"engine": "sim"}],
        }
    )
    assert sorted(found) == sorted(
        [
            "store.dnss: unknown key (did you mean 'dsn'?)",
            "auth.keys_required: expected true or false, got 'yes'",
            "router.timeouts.dial: expected a duration like 5s, got 'five'",
            "router.trusted_proxies: expected a list, got '10.0.0.1'",
            "models[0].name: required, and missing",
        ]
    )


@pytest.mark.parametrize(
    "mapping, expected",
    [
        ({"admin_remote": "no"}, "admin_remote: expected true or false, got 'no'"),
        ({"listen": 8080.5}, "listen: expected a string, got 8080.5 (put it in quotes)"),
        ({"router": []}, "router: expected a mapping of keys, got a list"),
        (
            {"router": {"max_body_bytes": "huge"}},
            "router.max_body_bytes: expected a size like 128MiB, got 'huge'",
        ),
        ({"prices": {"default": {"input": "cheap"}}}, "prices.default.input: expected a number, got 'cheap'"),
        (
            {"guard": {"mode": "enforcing"}},
            "guard.mode: expected one of enforce, shadow, off, got 'enforcing' (did you mean 'enforce'?)",
        ),
        ({"guard": {"policies": []}}, "guard.policies: expected a mapping of keys to values, got a list"),
        (
            {"models": [{"name": "m", "engine": "sim", "profiles": [{}], "class": "crtical"}]},
            "models[0].class: expected one of critical, standard, opportunistic, got 'crtical' (did you mean 'critical'?)",
        ),
        (
            {"models": [{"name": "m", "engine": "sim", "profiles": [{"env": {"A": [1]}}]}]},
            "models[0].profiles[0].env.A: expected a string, got a list",
        ),
        (
            {
                "models": [
                    {"name": "m", "engine": "sim", "profiles": [{"node_selector": {"llmgw.io/rack": None}}]}
                ]
            },
            'models[0].profiles[0].node_selector["llmgw.io/rack"]: expected a string, got nothing (null)',
        ),
    ],
)
def test_wrong_values_are_named_with_what_was_expected(mapping, expected):
    assert problems(mapping) == [expected]


def test_a_missing_secret_variable_names_the_key_and_the_variable():
    found = problems(
        {"models": [{"name": "gpt", "endpoints": [{"url": "https://x", "api_key": "env:NOT_SET_ANYWHERE"}]}]},
        environ={},
    )
    assert len(found) == 1
    assert found[0].startswith(
        "models[0].endpoints[0].api_key: environment variable NOT_SET_ANYWHERE is not set"
    )


# ---------------------------------------------------------------- files


def test_problems_in_a_file_carry_their_lines(tmp_path):
    path = write(
        tmp_path,
        """\
        listen: ":8080"
        store:
          dnss: /tmp/x.db
        router:
          timeouts:
            dial: five
        """,
    )
    with pytest.raises(ConfigError) as exc:
        load_server_config(path)
    error = exc.value
    assert error.source == str(path)
    # In the file's order, each with its line.
    assert [(p.line, str(p)) for p in error.details] == [
        (3, "store.dnss: unknown key (did you mean 'dsn'?)"),
        (6, "router.timeouts.dial: expected a duration like 5s, got 'five'"),
    ]
    text = str(error)
    assert f"{path}:3: store.dnss: unknown key" in text
    assert f"{path}:6: router.timeouts.dial: expected a duration" in text


def test_a_missing_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_server_config(tmp_path / "server.yaml")
    assert str(tmp_path / "server.yaml") in str(exc.value)
    assert "no such file" in str(exc.value)


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "listen: ':8080'\nrouter:\n  timeouts: [1\n  dial: 5s\n")
    with pytest.raises(ConfigError) as exc:
        load_server_config(path)
    (problem,) = exc.value.details
    assert problem.line == 4
    assert problem.message.startswith("not valid YAML")
    assert str(exc.value).startswith(f"{path}:4: not valid YAML")


def test_a_key_given_twice_is_refused(tmp_path):
    path = write(tmp_path, "listen: ':80'\nlisten: ':81'\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        load_server_config(path)


def test_a_file_that_is_not_a_mapping_says_so(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping of keys .* got a list"):
        load_server_config(write(tmp_path, "- listen\n- admin\n"))


def test_the_document_can_be_edited_in_place_keeping_comments(tmp_path):
    from llmgw.config.load import read_yaml

    path = write(tmp_path, "# the gateway\nlisten: ':8080'  # clients\n")
    document = read_yaml(path)
    document["listen"] = ":9000"
    import io

    from ruamel.yaml import YAML

    out = io.StringIO()
    YAML(typ="rt").dump(document, out)
    assert "# the gateway" in out.getvalue() and "# clients" in out.getvalue()
    assert parse_server_config(document).listen == ":9000"


def test_a_section_given_in_part_keeps_the_defaults_of_the_rest():
    config = parse_server_config(
        {"agent_tls": {"cert": "/srv/tls/cp.pem"}, "router": {"timeouts": {"dial": "1s"}}}
    )
    assert config.agent_tls.cert == "/srv/tls/cp.pem"
    assert config.agent_tls.key == "/etc/llmgw/tls/server-key.pem"
    assert config.router.timeouts.idle == ServerConfig().router.timeouts.idle


def test_the_error_names_its_source_when_given_a_mapping():
    with pytest.raises(ConfigError) as exc:
        parse_server_config({"lisen": ":80"}, source="helm values")
    assert str(exc.value) == "helm values: lisen: unknown key (did you mean 'listen'?)"
