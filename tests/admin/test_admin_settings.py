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
