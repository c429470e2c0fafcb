"""Values each of the right type but impossible, alone or together."""

import pytest

from llmgw.config import ConfigError, parse_agent_config, parse_server_config


def model(name, **keys):
    return {"name": name, "engine": "llamacpp", "profiles": [{}], **keys}


def problems(mapping):
    with pytest.raises(ConfigError) as exc:
        parse_server_config(mapping)
    return exc.value.problems


def agent_problems(mapping):
    with pytest.raises(ConfigError) as exc:
        parse_agent_config(mapping)
    return exc.value.problems


def one(mapping):
    (problem,) = problems(mapping)
    return problem


# ---------------------------------------------------------------- listeners


def test_admin_api_off_loopback_is_refused_unless_admin_remote():
    problem = one({"admin_listen": "0.0.0.0:9090"})
    assert problem.startswith("admin_listen: 0.0.0.0:9090 is not a loopback address")
    assert "admin_remote: true" in problem
    assert parse_server_config({"admin_listen": "10.0.0.5:9090", "admin_remote": True}).admin_remote


@pytest.mark.parametrize("address", ["127.0.0.1:9090", "localhost:9090", "[::1]:9090", "127.0.0.2:19090"])
def test_loopback_admin_addresses_are_fine(address):
    assert parse_server_config({"admin_listen": address}).admin_listen == address


@pytest.mark.parametrize("address", ["8080", "localhost", ":http", ":70000", "::1:9090"])
def test_a_listener_must_be_host_and_port(address):
    assert one({"listen": address}).startswith("listen: ")


def test_two_listeners_on_one_port_are_refused():
    assert (
        one({"metrics_listen": ":8080"})
        == "metrics_listen: :8080 is taken by listen (:8080); give it a port of its own"
    )


def test_metrics_can_be_turned_off():
    assert parse_server_config({"metrics_listen": ""}).metrics_listen == ""


def test_the_agent_port_needs_its_certificate_unless_insecure():
    problem = one({"agent_tls": {"cert": ""}})
    assert problem.startswith("agent_tls.cert: empty")
    assert "agent_insecure: true" in problem
    assert parse_server_config({"agent_insecure": True, "agent_tls": {"cert": ""}}).agent_insecure


# ---------------------------------------------------------------- numbers and durations


def test_negative_durations_are_refused_wherever_they_are():
    found = problems(
        {"router": {"timeouts": {"total": "-5s"}}, "models": [model("m", scaling={"idle_timeout": -60})]}
    )
    assert sorted(found) == [
        "models[0].scaling.idle_timeout: must not be negative, got -1m",
        "router.timeouts.total: must not be negative, got -5s",
    ]


def test_a_zero_interval_that_would_spin_is_refused():
    assert one({"router": {"scrape_interval": 0}}) == "router.scrape_interval: must be longer than 0s"


def test_zero_means_no_limit_where_it_says_so():
    config = parse_server_config({"router": {"timeouts": {"total": 0}}, "accounting": {"usage_retention": 0}})
    assert config.router.timeouts.total.total_seconds() == 0


def test_negative_counts_are_refused():
    assert (
        one({"router": {"retries": {"attempts": -1}}})
        == "router.retries.attempts: must not be negative, got -1"
    )


def test_first_byte_longer_than_total_is_refused():
    assert one({"router": {"timeouts": {"first_byte": "10m", "total": "5m"}}}).startswith(
        "router.timeouts.first_byte: 10m is longer than total (5m)"
    )


def test_a_cache_entry_larger_than_the_cache_is_refused():
    assert one({"router": {"cache": {"max_bytes": "1MiB", "max_entry_bytes": "2MiB"}}}) == (
        "router.cache.max_entry_bytes: 2MiB is more than the whole cache (max_bytes: 1MiB)"
    )


def test_trusted_proxies_must_be_addresses():
    assert one({"router": {"trusted_proxies": ["10.0.0.0/8", "proxy.local"]}}) == (
        "router.trusted_proxies[1]: expected an address or network like 10.0.0.0/8, got 'proxy.local'"
    )


def test_store_pool_and_address():
    assert one({"store": {"pool_min": 5, "pool_max": 2}}) == "store.pool_min: 5 is more than pool_max (2)"
    assert one({"store": {"dsn": "mysql://db/llmgw"}}).startswith("store.dsn: unknown kind 'mysql'")
    # The forms the store itself accepts pass.
    for dsn in ("sqlite:///var/lib/llmgw/store.db", "/var/lib/llmgw/store.db", "postgres://h1,h2/llmgw"):
        assert parse_server_config({"store": {"dsn": dsn}}).store.dsn.reveal() == dsn


def test_a_batch_larger_than_the_buffer_is_refused():
    assert one({"accounting": {"batch_size": 1000, "buffer_size": 10}}) == (
        "accounting.buffer_size: 10 rows cannot hold one batch (batch_size: 1000)"
    )


def test_backoff_and_parking():
    assert one({"control": {"backoff": {"initial": "10m", "max": "1m"}}}) == (
        "control.backoff.initial: 10m is longer than max (1m)"
    )
    assert one({"control": {"park_after": 0}}) == "control.park_after: must be at least 1, got 0"


# ---------------------------------------------------------------- admission, auth, guard, notify


def test_bands_are_named_once_and_the_default_is_one_of_them():
    found = problems({"admission": {"bands": [{"name": "high"}, {"name": "high"}], "default_band": "hgih"}})
    assert found == [
        "admission.bands[1].name: 'high' is bands[0]'s name too",
        "admission.default_band: no band is called 'hgih' (did you mean 'high'?); there are: high",
    ]
    assert one({"admission": {"bands": []}}).startswith("admission.bands: empty")


def test_single_sign_on_needs_its_client():
    found = problems({"auth": {"oidc": {"issuer": "https://login.example.com"}}})
    assert found == [
        "auth.oidc.client_id: empty, and single sign-on needs it once issuer is set",
        "auth.oidc.redirect_url: empty, and single sign-on needs it once issuer is set",
    ]


def test_guard_policies_are_checked_by_name_and_key():
    found = problems(
        {
            "guard": {
                "default": ["baseline", "finanse"],
                "policies": {"finance": {"mode": "strict", "inptu": {"pii": "block"}, "output": "block"}},
            }
        }
    )
    assert found == [
        "guard.default[1]: no policy is called 'finanse' (did you mean 'finance'?); there are: baseline, finance",
        "guard.policies.finance.mode: expected one of enforce, shadow, off, got 'strict'",
        "guard.policies.finance.inptu: unknown key (did you mean 'input'?)",
        "guard.policies.finance.output: expected a mapping",
    ]


def test_a_guard_policy_as_the_reference_writes_it_passes():
    policy = {
        "mode": "shadow",
        "fail": "closed",
        "input": {"pii": {"email": "redact"}, "injection": "block"},
        "judge": {"models": ["qwen3guard-0.6b"], "input": "block"},
    }
    config = parse_server_config({"guard": {"default": ["strict"], "policies": {"strict": policy}}})
    assert config.guard.policies["strict"]["judge"]["models"] == ["qwen3guard-0.6b"]


def test_notify_sinks():
    found = problems({"notify": {"sinks": [{"url": "hooks.example.com", "events": ["node_lsot"]}]}})
    assert found == [
        "notify.sinks[0].url: expected an address starting http:// or https://, got 'hooks.example.com'",
        "notify.sinks[0].events[0]: no event is called 'node_lsot' (did you mean 'node_lost'?); "
        "there are: model_parked, node_lost, budget_spent, model_update_available, backup_failed",
    ]


# ---------------------------------------------------------------- models


def test_two_models_of_one_name_are_refused():
    assert one({"models": [model("qwen"), model("qwen")]}) == (
        "models[1].name: 'qwen' already names models[0] (qwen); every name and alias must be unique"
    )


def test_an_alias_taken_by_another_model_is_refused():
    assert one({"models": [model("a", aliases=["small"]), model("b", aliases=["small"])]}).startswith(
        "models[1].aliases[0]: 'small' already names models[0] (a)"
    )


def test_a_fallback_must_name_a_model():
    assert one({"models": [model("big", fallbacks=["smal"]), model("small")]}) == (
        "models[0].fallbacks[0]: no model is called 'smal' (did you mean 'small'?); there are: big, small"
    )
    assert (
        one({"models": [model("big", fallbacks=["big"])]}) == "models[0].fallbacks[0]: names the model itself"
    )
    config = parse_server_config(
        {"models": [model("big", fallbacks=["tiny"]), model("small", aliases=["tiny"])]}
    )
    assert config.model("tiny").name == "small"


def test_min_above_max_replicas_is_refused():
    assert (
        one({"models": [model("m", scaling={"min": 3, "max": 2})]})
        == "models[0].scaling.min: 3 is more than max (2)"
    )


def test_an_on_demand_model_starts_from_zero():
    assert one({"models": [model("m", scaling={"min": 1, "max": 2, "on_demand": True})]}).startswith(
        "models[0].scaling.min: must be 0 for an on-demand model"
    )


def test_a_model_needs_a_way_to_be_served():
    assert one({"models": [{"name": "m"}]}).startswith("models[0]: 'm' has neither profiles")
    assert one({"models": [model("m", endpoints=[{"url": "https://api.openai.com/v1"}])]}).startswith(
        "models[0].endpoints: a model runs on the cluster (profiles) or at a provider (endpoints), not both"
    )


def test_profiles_need_an_engine_and_unique_names():
    found = problems({"models": [{"name": "m", "profiles": [{"gpus": 1}, {"gpus": 2}]}]})
    assert found == [
        "models[0].profiles[0].engine: empty, and the model names no engine either; give one, like llamacpp or vllm",
        "models[0].profiles[1].name: 'default' is profiles[0]'s name too; give each profile its own",
        "models[0].profiles[1].engine: empty, and the model names no engine either; give one, like llamacpp or vllm",
    ]


def test_a_gpu_class_on_a_cpu_profile_is_refused():
    assert one({"models": [model("m", profiles=[{"gpu_class": "h100-80g"}])]}) == (
        "models[0].profiles[0].gpu_class: asks for h100-80g cards, but gpus is 0"
    )


def test_a_negative_price_is_refused():
    assert (
        one({"models": [model("m", price={"input": -1})]})
        == "models[0].price.input: must not be negative, got -1.0"
    )


# ---------------------------------------------------------------- agent.yaml


def test_an_agent_needs_a_control_plane():
    assert agent_problems({}) == [
        "control_planes: empty; give at least one control plane's agent address, like https://10.0.0.140:7443"
    ]


def test_control_plane_addresses_are_checked():
    found = agent_problems({"control_planes": ["https://10.0.0.1:7443", "10.0.0.2", "http://10.0.0.3:7443"]})
    assert found == [
        "control_planes[1]: expected an address like https://10.0.0.140:7443, got '10.0.0.2'",
        "control_planes[2]: http:// has no TLS; write https://, or set insecure: true (one machine or a test only)",
    ]
    config = parse_agent_config(
        {"control_planes": ["http://127.0.0.1:7443"], "insecure": True, "tls": {"cert": ""}}
    )
    assert config.insecure


def test_an_agent_without_its_certificate_is_refused():
    assert agent_problems({"control_planes": ["10.0.0.1:7443"], "tls": {"key": ""}})[0].startswith(
        "tls.key: empty"
    )


def test_an_agent_key_misspelt_and_a_server_key_in_agent_yaml():
    assert agent_problems({"control_planes": ["10.0.0.1:7443"], "lables": {}, "listen": ":80"}) == [
        "lables: unknown key (did you mean 'labels'?)",
        "listen: unknown key (it belongs in server.yaml)",
    ]


def test_agent_durations_and_counts():
    assert agent_problems(
        {"control_planes": ["10.0.0.1:7443"], "heartbeat_interval": "0s", "log_ring_size": -1}
    ) == [
        "heartbeat_interval: must be longer than 0s",
        "log_ring_size: must not be negative, got -1",
    ]


def test_agent_gpu_thresholds():
    config = parse_agent_config({"control_planes": ["10.0.0.1:7443"], "insecure": True,
                                 "gpu_degraded_temperature_c": 83, "gpu_foreign_memory_limit": "512MiB"})
    assert (config.gpu_degraded_temperature_c, config.gpu_foreign_memory_limit) == (83, 512 << 20)
    defaults = parse_agent_config({"control_planes": ["10.0.0.1:7443"], "insecure": True})
    assert (defaults.gpu_degraded_temperature_c, defaults.gpu_foreign_memory_limit) == (87.0, 2 << 30)
    assert agent_problems({"control_planes": ["10.0.0.1:7443"], "gpu_foreign_memory_limit": "lots"}) == [
        "gpu_foreign_memory_limit: expected a size like 128MiB, got 'lots'"]
    assert agent_problems({"control_planes": ["10.0.0.1:7443"], "gpu_degraded_temperature_c": 12}) == [
        "gpu_degraded_temperature_c: expected °C between 30 and 120, like 87, got 12: below, every running card "
        "would be kept out; above, none ever would"]


def test_oidc_rules_are_checked_naming_the_rule():
    from llmgw.config import ConfigError, parse_server_config

    with pytest.raises(ConfigError) as refused:
        parse_server_config({"auth": {"oidc": {
            "issuer": "https://login.example.com", "client_id": "llmgw",
            "redirect_url": "https://llm.example.com/auth/callback",
            "rules": [{"claim": "groups", "contains": "llmgw-admins", "role": "admin"},
                      {"claim": "email", "role": "boss"},
                      {"claim": "groups", "equals": "x", "suffix": "y", "org": "acme"},
                      {"claim": "groups", "equals": "x"}]}}})
    problems = [p.split(": ", 1)[1] if p.startswith("server.yaml") else p for p in refused.value.problems]
    assert "auth.oidc.rules[1]: give exactly one of equals, contains or suffix" in problems
    assert any(p.startswith("auth.oidc.rules[1].role: 'boss' is not a staff role") for p in problems)
    assert "auth.oidc.rules[2]: give exactly one of equals, contains or suffix, not equals and suffix" in problems
    assert any(p.startswith("auth.oidc.rules[3]: gives nothing") for p in problems)
    assert not any("rules[0]" in p for p in problems)


def test_no_passwords_without_a_provider_is_refused():
    from llmgw.config import ConfigError, parse_server_config

    with pytest.raises(ConfigError) as refused:
        parse_server_config({"auth": {"oidc": {"no_passwords": True}}})
    assert any("auth.oidc.no_passwords: true without an issuer" in p for p in refused.value.problems)
