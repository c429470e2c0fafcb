"""Plugins load from the `llmgw` entry-point group, checked as they load."""

import importlib.metadata as md
import json
import os
import subprocess
import sys
import textwrap

import pytest

from llmgw.plugins.manager import PluginError, allowed_names, load_plugins
from llmgw.plugins.types import Engine, LaunchSpec

ENGINES = {"sim", "llamacpp", "vllm", "sglang", "trtllm"}


def test_first_party_engines_register():
    plugins = load_plugins(allow=None)
    assert ENGINES <= set(plugins.engines())
    for engine in plugins.engines().values():
        assert isinstance(engine, Engine) and engine.description


def test_llmgw_plugins_restricts_which_load(monkeypatch):
    monkeypatch.setenv("LLMGW_PLUGINS", "sim, vllm")
    assert allowed_names() == {"sim", "vllm"}
    plugins = load_plugins()
    assert set(plugins.engines()) == {"sim", "vllm"}


def test_llmgw_plugins_naming_a_missing_plugin_says_so(monkeypatch):
    monkeypatch.setenv("LLMGW_PLUGINS", "sim,nosuch")
    with pytest.raises(PluginError, match="nosuch"):
        load_plugins()


def _entry_point(tmp_path, monkeypatch, name, source):
    module = f"llmgw_test_plugin_{name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return md.EntryPoint(name=name, value=module, group="llmgw")


GOOD = """
from llmgw.plugins import hookimpl
from llmgw.plugins.types import Engine, LaunchPlan

class Echo(Engine):
    name = "echo"
    description = "an engine from a third party"
    def plan(self, spec):
        return LaunchPlan(argv=["echo", spec.model], env={})

@hookimpl
def llmgw_engines():
    return [Echo()]
"""


def test_a_third_party_plugin_loads_like_a_first_party_one(tmp_path, monkeypatch):
    ep = _entry_point(tmp_path, monkeypatch, "echo", GOOD)
    plugins = load_plugins(allow=None, entry_points=[ep])
    engine = plugins.engines()["echo"]
    plan = engine.plan(LaunchSpec(model="m", weights="/w", host="127.0.0.1", port=1, api_key="k"))
    assert list(plan.argv) == ["echo", "m"]
    assert plugins.infos[0].contributes == {"engines": ["echo"]}


def test_a_misspelt_hook_is_refused_naming_the_plugin(tmp_path, monkeypatch):
    ep = _entry_point(tmp_path, monkeypatch, "typo", """
        from llmgw.plugins import hookimpl
        @hookimpl
        def llmgw_engine():
            return []
    """)
    with pytest.raises(PluginError) as exc:
        load_plugins(allow=None, entry_points=[ep])
    assert "'typo'" in str(exc.value) and "llmgw_engine" in str(exc.value)


def test_a_plugin_that_fails_to_import_is_refused_naming_it(tmp_path, monkeypatch):
    ep = _entry_point(tmp_path, monkeypatch, "broken", "import no_such_module_anywhere\n")
    with pytest.raises(PluginError, match="'broken'.*failed to load"):
        load_plugins(allow=None, entry_points=[ep])


def test_two_engines_of_one_name_are_refused(tmp_path, monkeypatch):
    a = _entry_point(tmp_path, monkeypatch, "echo-a", GOOD)
    b = _entry_point(tmp_path, monkeypatch, "echo-b", GOOD)
    plugins = load_plugins(allow=None, entry_points=[a, b])
    with pytest.raises(PluginError, match="two plugins give a engine named 'echo'|named 'echo'"):
        plugins.engines()


def _make_distribution(root, name, module_source, hook="llmgw_engines"):
    pkg = root / name
    mod = name.replace("-", "_")
    (pkg / mod).mkdir(parents=True)
    (pkg / mod / "__init__.py").write_text(textwrap.dedent(module_source))
    (pkg / "setup.cfg").write_text(textwrap.dedent(f"""
        [metadata]
        name = {name}
        version = 1.2.3
        [options]
        packages = find:
        [options.entry_points]
        llmgw =
            {name} = {mod}
    """))
    (pkg / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    return pkg


@pytest.mark.slow
def test_an_installed_third_party_distribution_is_listed_and_a_broken_one_refused(tmp_path):
    target = tmp_path / "site"
    good = _make_distribution(tmp_path, "acme-llmgw-echo", GOOD)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(good)], check=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-m", "llmgw", "plugins", "--json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["acme-llmgw-echo"]["version"] == "1.2.3"
    assert listed["acme-llmgw-echo"]["contributes"] == {"engines": ["echo"]}
    assert ENGINES <= {n for p in listed.values() for n in p["contributes"].get("engines", [])}

    bad = _make_distribution(tmp_path, "acme-llmgw-bad", """
        from llmgw.plugins import hookimpl
        @hookimpl
        def llmgw_enignes():
            return []
    """)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(bad)], check=True)
    proc = subprocess.run([sys.executable, "-m", "llmgw", "plugins"], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "acme-llmgw-bad" in proc.stderr and "llmgw_enignes" in proc.stderr
    # Leaving it out lets the rest load.
    env["LLMGW_PLUGINS"] = "sim,acme-llmgw-echo"
    proc = subprocess.run([sys.executable, "-m", "llmgw", "plugins"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "acme-llmgw-echo" in proc.stdout and "vllm" not in proc.stdout


def test_the_notification_sinks_plugin_is_listed(capsys):
    from llmgw.cli.main import main

    assert main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["notify-sinks"]["distribution"] == "llmgw-notify-sinks"
    assert listed["notify-sinks"]["contributes"] == {"notification sinks": ["webhook", "slack", "email"]}
    assert main(["plugins"]) == 0
    assert "notification sinks: webhook, slack, email" in capsys.readouterr().out
