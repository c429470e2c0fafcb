"""The catalog: server.yaml's models and run-time ones, checked, kept in the store, seen by every control plane."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.control.catalog import (
    Catalog,
    CatalogError,
    UnknownModel,
    check_engines,
    parse_model,
)
from llmgw.store import open_store

from .conftest import ENGINES, model

SPEC = {"name": "added", "engine": "sim", "profiles": [{"name": "d", "cores": 2}],
        "scaling": {"min": 1, "max": 2}, "class": "opportunistic", "owner": "team:search"}


async def test_add_scale_remove_and_the_audit(sqlite_store):
    cat = Catalog([model("filed", aliases=["f"])], sqlite_store, ENGINES)
    added = await cat.add(SPEC, actor="ann")
    assert (added.name, added.origin, added.version, added.model_class) == ("added", "store", 1, "opportunistic")
    assert added.config.profiles[0].cores == 2 and added.valid
    assert [m.name for m in cat.cluster_models()] == ["added", "filed"]
    assert cat.get("f").name == "filed"

    scaled = await cat.scale("added", min=0, max=3, on_demand=True, idle_timeout="10m", actor="bob")
    assert (scaled.scaling.min, scaled.scaling.max, scaled.scaling.on_demand, scaled.version) == (0, 3, True, 2)
    assert scaled.scaling.idle_timeout == dt.timedelta(minutes=10)

    removed = await cat.remove("added", actor="ann")
    assert removed.name == "added" and cat.get("added") is None
    actions = [(e.actor, e.action, e.target) for e in reversed(await sqlite_store.list_audit())]
    assert actions == [("ann", "models.add", "model:added"), ("bob", "models.scale", "model:added"),
                       ("ann", "models.remove", "model:added")]


async def test_a_server_yaml_model_is_scaled_through_an_override(sqlite_store):
    cat = Catalog([model("filed", scaling={"min": 1, "max": 1})], sqlite_store, ENGINES)
    scaled = await cat.scale("filed", max=4, actor="ann")
    assert (scaled.origin, scaled.scaling_from, scaled.scaling.min, scaled.scaling.max) == ("file", "store", 1, 4)
    again = await cat.scale("filed", min=2, actor="ann")
    assert (again.scaling.min, again.scaling.max) == (2, 4)
    with pytest.raises(CatalogError, match="declared in server.yaml; remove it there"):
        await cat.remove("filed", actor="ann")
    back = await cat.reset_scaling("filed", actor="ann")
    assert (back.scaling_from, back.scaling.max) == ("file", 1)


async def test_every_problem_is_said_with_its_path(sqlite_store):
    cat = Catalog([model("filed", aliases=["taken"])], sqlite_store, ENGINES)
    # What server.yaml would refuse is said first, every problem at once ...
    with pytest.raises(CatalogError) as e:
        await cat.add({"name": "bad", "engine": "sim", "profiles": [{"name": "d"}, {"name": "d"}],
                       "scaling": {"min": 3, "max": 1}}, actor="ann")
    assert str(e.value) == ("model: profiles[1].name: 'd' is profiles[0]'s name too; give each profile its own; "
                            "scaling.min: 3 is more than max (1)")
    # ... then what only the cluster knows: engines installed, names taken.
    with pytest.raises(CatalogError) as e:
        await cat.add({"name": "bad", "engine": "nope", "aliases": ["taken"],
                       "profiles": [{"name": "d"}]}, actor="ann")
    assert e.value.problems == [
        "profiles[0].engine: no engine called 'nope' is installed here (there are: llamacpp, sim, vllm)",
        "aliases: 'taken' already names filed",
    ]
    with pytest.raises(CatalogError) as e:
        await cat.add({"name": "unsafe", "engine": "vllm",
                       "profiles": [{"name": "d", "gpus": 0, "args": ["--trust-remote-code"],
                                     "env": {"LD_PRELOAD": "/tmp/x.so"}}]}, actor="ann")
    assert e.value.problems[0] == "profiles[0].gpus: engine vllm needs GPUs; give the number each replica needs"
    assert any("--trust-remote-code" in p for p in e.value.problems)
    assert any("LD_PRELOAD" in p for p in e.value.problems)
    with pytest.raises(CatalogError, match=r"scaling.min: must be 0 for an on-demand model"):
        await cat.add({**SPEC, "scaling": {"min": 1, "max": 1, "on_demand": True}}, actor="ann")
    with pytest.raises(CatalogError, match="bogus: unknown key"):
        await cat.add({**SPEC, "bogus": 1}, actor="ann")
    with pytest.raises(CatalogError, match="declared in server.yaml"):
        await cat.add({**SPEC, "name": "filed"}, actor="ann")
    with pytest.raises(CatalogError, match="endpoints: a model forwarded to a provider"):
        await cat.add({"name": "gpt", "endpoints": [{"url": "https://api.example.com/v1"}]}, actor="ann")
    await cat.add(SPEC, actor="ann")
    with pytest.raises(CatalogError, match="already in the catalog"):
        await cat.add(SPEC, actor="ann")
    replaced = await cat.add({**SPEC, "owner": "team:ads"}, actor="ann", replace=True)
    assert replaced.config.owner == "team:ads" and replaced.version == 2
    with pytest.raises(CatalogError, match="scaling.min: 5 is more than max"):
        await cat.scale("added", min=5, actor="ann")
    with pytest.raises(UnknownModel):
        await cat.scale("ghost", max=1, actor="ann")
    assert await sqlite_store.get_catalog_entry("bad") is None


async def test_another_control_plane_sees_changes_and_stale_writes_are_refused(tmp_path):
    dsn = f"sqlite:///{tmp_path}/shared.db"
    one, two = await open_store(dsn), await open_store(dsn)
    try:
        a, b = Catalog([], one, ENGINES), Catalog([], two, ENGINES)
        await a.add(SPEC, actor="ann")
        assert b.get("added") is None
        assert await b.load() is True and b.get("added").version == 1
        assert await b.load() is False  # nothing new
        await a.scale("added", max=5, actor="ann")
        # b still believes version 1: its change is refused, not lost.
        with pytest.raises(CatalogError, match="at version 2, you read 1"):
            await b.scale("added", max=1, actor="bob")
        await b.load()
        assert (await b.scale("added", max=1, actor="bob")).version == 3
    finally:
        await one.close()
        await two.close()


async def test_bad_rows_and_file_models_are_kept_aside_with_their_problems(sqlite_store):
    await sqlite_store.put_catalog_entry("broken", "model", {"name": "broken", "engine": "sim",
                                                             "profiles": [{"gpus": "many"}]}, actor="x")
    cat = Catalog([model("filed", engine="gone")], sqlite_store, ENGINES)
    await cat.load()
    assert [m.name for m in cat.cluster_models()] == []
    assert not cat.get("broken").valid and "profiles[0].gpus" in cat.get("broken").problems[0]
    assert cat.get("filed").problems == (
        "profiles[0].engine: no engine called 'gone' is installed here (there are: llamacpp, sim, vllm)",)


def test_max_zero_is_allowed_at_run_time_and_engines_are_screened():
    stopped = parse_model({**SPEC, "scaling": {"min": 0, "max": 0}})
    assert stopped.scaling.max == 0
    assert check_engines(model("m", engine="llamacpp", profiles=[{"name": "d", "gpus": 2}]), ENGINES) == []
    assert check_engines(model("m"), None) == []


async def test_a_run_time_model_falls_back_to_models_of_the_catalog_only(sqlite_store):
    cat = Catalog([model("filed", aliases=["f"])], sqlite_store, ENGINES)
    with pytest.raises(CatalogError) as e:
        await cat.add({"name": "new", "engine": "sim", "profiles": [{"name": "d"}],
                       "fallbacks": ["new", "gone"]}, actor="ann")
    assert e.value.problems == ["fallbacks[0]: names the model itself",
                                "fallbacks[1]: no model called 'gone' is in the catalog; there are: f, filed"]
    assert "new" not in cat
    with pytest.raises(CatalogError, match="fallbacks: give a list of model names"):
        await cat.add({"name": "new", "engine": "sim", "profiles": [{"name": "d"}], "fallbacks": "f"}, actor="ann")
    added = await cat.add({"name": "new", "engine": "sim", "profiles": [{"name": "d"}], "fallbacks": ["f"]},
                          actor="ann")
    assert added.config.fallbacks == ["f"]
    assert (await cat.add({"name": "other", "engine": "sim", "profiles": [{"name": "d"}],
                           "fallbacks": ["new"]}, actor="ann")).config.fallbacks == ["new"]
