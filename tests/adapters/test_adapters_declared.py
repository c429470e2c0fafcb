"""A model's adapters are checked where server.yaml is read and where a model is added at run time."""

from __future__ import annotations

import pytest

from llmgw.config.load import ConfigError, parse_server_config
from llmgw.control.catalog import Catalog, CatalogError
from llmgw.plugins.manager import load_plugins

SQL = {"name": "sql", "source": "adapters/sql.gguf"}


def model(**extra):
    return {"name": "qwen", "aliases": ["small"], "engine": "sim", "profiles": [{"name": "cpu"}], **extra}


def problems(*models) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"models": list(models)})
    return [str(p) for p in caught.value.problems]


def test_adapters_are_read_with_their_defaults():
    config = parse_server_config({"models": [model(adapters=[SQL, {"name": "docs", "source": "https://h/d.gguf",
                                                                   "sha256": "a" * 64, "scale": 0.5}])]})
    sql, docs = config.models[0].adapters
    assert (sql.name, sql.source, sql.sha256, sql.scale) == ("sql", "adapters/sql.gguf", "", 1.0)
    assert (docs.sha256, docs.scale) == ("a" * 64, 0.5)
    assert config.models[0].max_adapters == 0


def test_each_bad_field_is_named():
    found = problems(model(adapters=[{"name": "a:b", "source": "x"}, {"name": "ok", "source": " "},
                                     {"name": "ok", "source": "y", "sha256": "nothex", "scale": 0}],
                           max_adapters=-1))
    text = "\n".join(found)
    assert "models[0].adapters[0].name: 'a:b' is not an adapter name" in text
    assert "models[0].adapters[1].source: empty" in text
    assert "models[0].adapters[2].name: 'ok' is adapters[1]'s name too" in text
    assert "models[0].adapters[2].sha256: 'nothex' is not a SHA-256" in text
    assert "models[0].adapters[2].scale: must be above 0" in text
    assert "models[0].max_adapters: must be 0" in text


def test_an_adapter_name_may_not_be_a_model_alias_or_another_models_adapter():
    other = {"name": "llama", "engine": "sim", "profiles": [{"name": "cpu"}], "adapters": [SQL]}
    text = "\n".join(problems(model(adapters=[SQL, {"name": "llama", "source": "z"}]), other))
    assert "models[0].adapters[1].name: 'llama' already names model llama" in text
    assert "models[1].adapters[0].name: 'sql' already names adapter sql of qwen" in text


def test_a_provider_model_and_max_adapters_without_adapters_are_refused():
    provider = {"name": "gpt", "endpoints": [{"url": "https://api.openai.com/v1"}], "adapters": [SQL]}
    text = "\n".join(problems(provider, model(max_adapters=2)))
    assert "models[0].adapters: a model forwarded to a provider serves no adapters" in text
    assert "models[1].max_adapters: set, but the model declares no adapters" in text


@pytest.fixture(scope="module")
def engines():
    return load_plugins().engines()


def test_the_catalog_refuses_an_engine_without_adapters_and_max_adapters_on_llamacpp(engines):
    catalog = Catalog([], engines=engines)
    with pytest.raises(CatalogError) as caught:
        catalog.check({"name": "m", "engine": "sglang", "profiles": [{"name": "g", "gpus": 1}], "adapters": [SQL]})
    assert "profiles[0].engine: sglang loads no LoRA adapters" in str(caught.value)
    with pytest.raises(CatalogError) as caught:
        catalog.check({"name": "m", "engine": "trtllm", "profiles": [{"name": "g", "gpus": 1}], "adapters": [SQL]})
    assert "profiles[0].engine: trtllm loads no LoRA adapters" in str(caught.value)
    with pytest.raises(CatalogError) as caught:
        catalog.check({"name": "m", "engine": "llamacpp", "profiles": [{"name": "c"}], "adapters": [SQL],
                       "max_adapters": 1})
    assert "max_adapters: llamacpp loads every adapter when it starts" in str(caught.value)
    assert catalog.check({"name": "m", "engine": "vllm", "profiles": [{"name": "g", "gpus": 1}], "adapters": [SQL],
                          "max_adapters": 1}).max_adapters == 1


def test_a_model_added_at_run_time_may_not_take_an_adapters_name(engines):
    from llmgw.config.load import parse_server_config as parse

    catalog = Catalog(parse({"models": [model(adapters=[SQL])]}).models, engines=engines)
    with pytest.raises(CatalogError) as caught:
        catalog.check({"name": "sql", "engine": "sim", "profiles": [{"name": "cpu"}]})
    assert caught.value.conflict and "'sql' already names an adapter of qwen" in str(caught.value)
    with pytest.raises(CatalogError) as caught:
        catalog.check({"name": "other", "engine": "sim", "profiles": [{"name": "cpu"}], "adapters": [SQL]})
    assert "adapters[0].name: 'sql' is already an adapter of qwen" in str(caught.value)
