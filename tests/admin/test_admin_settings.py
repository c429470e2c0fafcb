"""Cluster settings: read, set with validation, unset, history; unknown keys refused by name."""

from __future__ import annotations

import pytest

from llmgw.admin.settings import REGISTRY
from llmgw.config.server import AdmissionConfig, RetryConfig, RouterConfig, ServerConfig


async def test_settings_show_the_file_value_until_set(make_admin):
    config = ServerConfig(router=RouterConfig(retries=RetryConfig(attempts=4)))
    admin = await make_admin(None, config)
    listed = {s["key"]: s for s in (await admin.call("GET", "/settings"))["settings"]}
    assert set(listed) == set(REGISTRY)
    attempts = listed["router.retries.attempts"]
    assert (attempts["value"], attempts["source"], attempts["type"], attempts["version"]) == (4, "file", "integer", 0)
    assert "replicas to try" in attempts["doc"]
    assert listed["guard.mode"]["choices"] == ["enforce", "shadow", "off"]


async def test_set_checks_type_and_bounds_and_keeps_history(bare):
    s = await bare.call("PUT", "/settings/router.retries.attempts", {"value": 3})
    assert (s["value"], s["source"], s["file_value"], s["version"]) == (3, "store", 2, 1)
    s = await bare.call("PUT", "/settings/admission.max_wait", {"value": "90s"})
    assert s["value"] == "1m30s"
    assert (await bare.call("PUT", "/settings/admission.max_wait", {"value": 5}))["value"] == "5s"
    for key, value, words in [
        ("router.retries.attempts", 11, "11 is above the most allowed, 10"),
        ("router.retries.attempts", "3", "expected a whole number, got '3'"),
        ("router.retries.attempts", True, "expected a whole number, got true"),
        ("admission.max_wait", "soon", "expected a duration like 5s, got 'soon'"),
        ("admission.max_wait", "0s", "below the least allowed"),
        ("guard.mode", "enforcing", "expected one of enforce, shadow, off, got 'enforcing' (did you mean 'enforce'?)"),
        ("admission.default_band", "platinum", "expected one of gold, silver, bronze"),
        ("router.affinity.prefix", "yes", "expected true or false"),
    ]:
        error = await bare.refused("PUT", f"/settings/{key}", {"value": value}, status=400)
        assert error.startswith(f"{key}: ") and words in error, error
    history = (await bare.call("GET", "/settings/history"))["changes"]
    assert [(c["key"], c["value"]) for c in history] == [
        ("admission.max_wait", "5s"), ("admission.max_wait", "1m30s"), ("router.retries.attempts", 3)]
    one = (await bare.call("GET", "/settings/history?key=router.retries.attempts"))["changes"]
    assert len(one) == 1
    unset = await bare.call("DELETE", "/settings/admission.max_wait")
    assert (unset["value"], unset["source"]) == ("30s", "file")
    assert (await bare.call("GET", "/settings/history?limit=1"))["changes"][0]["removed"] is True


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_an_unknown_key_is_refused_naming_it(bare, method):
    error = await bare.refused(method, "/settings/router.retries.atempts",
                               {"value": 1} if method == "PUT" else None, status=400)
    assert error == "unknown setting 'router.retries.atempts'; did you mean router.retries.attempts?"
    error = await bare.refused(method, "/settings/colour", {"value": 1} if method == "PUT" else None, status=400)
    assert "unknown setting 'colour'; the settings are admission.default_band" in error


async def test_bands_come_from_the_configuration(make_admin):
    from llmgw.config.server import Band

    admin = await make_admin(None, ServerConfig(admission=AdmissionConfig(bands=[Band("fast", 2)], default_band="fast")))
    assert (await admin.call("PUT", "/settings/admission.default_band", {"value": "fast"}))["value"] == "fast"


class TakesLiveKeys:
    """A live applier that takes up every key llmgw.server.live names, with no gateway behind it."""

    from llmgw.server.live import LIVE_KEYS as _LIVE

    keys = frozenset(_LIVE)

    def apply(self, running, new):
        from llmgw.config.schema import parse_path, replace_at, value_at

        taken = [k for k in self._LIVE if value_at(new, parse_path(k)) != value_at(running, parse_path(k))]
        for key in taken:
            running = replace_at(running, parse_path(key), value_at(new, parse_path(key)))
        return running, taken


async def test_a_setting_is_in_force_here_at_once_and_the_admin_view_follows(make_admin):
    from llmgw.admin.state import ADMIN

    admin = await make_admin(None, ServerConfig(router=RouterConfig(retries=RetryConfig(attempts=4))),
                             live=TakesLiveKeys())
    state = admin.client.app[ADMIN]
    s = await admin.call("PUT", "/settings/router.retries.attempts", {"value": 1})
    assert (s["applies"], s["restart_pending"], state.config.router.retries.attempts) == ("live", False, 1)
    s = await admin.call("PUT", "/settings/router.timeouts.dial", {"value": "1s"})
    assert (s["value"], s["applies"], s["restart_pending"]) == ("1s", "restart", True)
    assert str(state.config.router.timeouts.dial) == "5s"  # the connection pool was made with it
    s = await admin.call("DELETE", "/settings/router.retries.attempts")
    assert (s["value"], s["source"], state.config.router.retries.attempts) == (4, "file", 4)
    s = await admin.call("DELETE", "/settings/router.timeouts.dial")
    assert s["restart_pending"] is False


async def test_a_value_stored_past_the_checks_is_shown_with_why_it_is_not_used(make_admin, store):
    admin = await make_admin(None)
    await store.set_setting("admission.default_band", "platinum", actor="a-script")
    s = await admin.call("GET", "/settings/admission.default_band")
    assert (s["value"], s["source"], s["version"]) == ("silver", "file", 1)
    assert "expected one of gold, silver, bronze, got 'platinum'" in s["problem"]


async def test_the_control_planes_own_keys_are_not_cluster_settings(make_admin, store, caplog):
    # The leader keeps its parked models under a reserved key (llmgw.control.parked): not a setting.
    from llmgw.control.parked import PARKED_SETTING

    admin = await make_admin(None)
    await store.set_setting(PARKED_SETTING, {"qwen": {"reason": "parked", "spec": {}, "failures": 5}},
                            actor="control-plane")
    listed = [s["key"] for s in (await admin.call("GET", "/settings"))["settings"]]
    assert PARKED_SETTING not in listed and set(listed) == set(REGISTRY)
    assert PARKED_SETTING not in [c["key"] for c in (await admin.call("GET", "/settings/history"))["changes"]]
    error = await admin.refused("GET", f"/settings/{PARKED_SETTING}", status=400)
    assert error.startswith(f"unknown setting '{PARKED_SETTING}'")
    assert not [r for r in caplog.records if "cannot be used" in r.getMessage()]
