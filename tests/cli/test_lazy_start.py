"""`llmgw --help`, `--version` and `version` start without loading any server code."""

import importlib
import json
import subprocess
import sys

import pytest

from llmgw.cli.main import COMMAND_MODULES, COMMAND_SUMMARIES, _command_word

HEAVY = ("aiohttp", "asyncpg", "cryptography", "prometheus_client", "urwid", "zmq", "numpy", "gguf",
         "llmgw.router", "llmgw.control", "llmgw.server", "llmgw.agent", "llmgw.store", "llmgw.admin",
         "llmgw.web", "llmgw.simengine", "llmgw.up", "llmgw.config", "llmgw.plugins", "llmgw.pki")

PROBE = """
import contextlib, io, json, sys
from llmgw.cli.main import main
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def loaded_by(*argv):
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["version"], ["version", "--json"]])
def test_help_and_version_import_no_server_code(argv):
    seen = loaded_by(*argv)
    assert seen["code"] == 0
    heavy = [m for m in seen["modules"] if m.split(".")[0] in HEAVY or m.startswith(tuple(p + "." for p in HEAVY))
             or m in HEAVY]
    assert heavy == []


def test_dash_dash_version_is_the_first_line_of_version():
    first = subprocess.run([sys.executable, "-m", "llmgw", "version"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[0]
    flag = subprocess.run([sys.executable, "-m", "llmgw", "--version"], capture_output=True, text=True, check=True)
    assert flag.stdout.strip() == first
    assert first.startswith("llmgw ")


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_the_help_listed_without_importing_a_command_is_its_own(name):
    own = importlib.import_module(f"llmgw.cli.{name}_cmd").HELP
    assert COMMAND_SUMMARIES.get(name) == own, (
        f"llmgw/cli/main.py: COMMAND_SUMMARIES[{name!r}] must be llmgw.cli.{name}_cmd.HELP, or `llmgw --help` "
        f"imports that module on every start")


def test_the_command_named_is_found_past_the_top_level_options():
    assert _command_word(["--log-level", "debug", "--log-format=json", "up", "--port", "0"]) == "up"
    assert _command_word(["--help"]) is None
    assert _command_word(["--", "version"]) == "version"


def test_a_command_built_in_full_still_parses_its_own_options():
    seen = loaded_by("--log-level", "warning", "config", "example", "--agent")
    assert seen["code"] == 0
    assert "control_planes" in seen["out"]
