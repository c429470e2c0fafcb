"""The command tree: every command documented, unknown ones refused."""

import subprocess
import sys

import pytest

from llmgw.cli.main import COMMAND_MODULES, build_parser, main

COMMANDS = [m.replace("_", "-") for m in COMMAND_MODULES]


def test_every_command_is_listed_in_top_level_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_help_that_says_what_it_does(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"llmgw {name}" in out
    # A sentence, not just a usage line.
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 5


def test_unknown_command_prints_usage_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: llmgw" in err
    assert "frobnicate" in err


def test_no_command_says_to_name_one(capsys):
    assert main([]) == 2
    assert "name a command" in capsys.readouterr().err


def test_a_command_not_built_yet_says_so_in_one_line_and_exits_2(capsys):
    parser = build_parser()
    stubs = []
    for name in COMMANDS:
        try:
            args = parser.parse_args([name])
        except SystemExit:  # a built command with required arguments
            continue
        handler = getattr(args, "handler", None)
        if handler is not None and getattr(handler, "__qualname__", "").startswith("not_built"):
            stubs.append(name)
    capsys.readouterr()
    for name in stubs:
        assert main([name]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not built yet" in err[0]


def test_version_names_the_version_and_python():
    out = subprocess.run([sys.executable, "-m", "llmgw", "version"], capture_output=True, text=True, check=True).stdout
    from llmgw import __version__

    assert f"llmgw {__version__}" in out
    assert "running on: CPython" in out


def test_version_json(capsys):
    import json

    assert main(["version", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"version", "commit", "python", "platform"} <= set(info)
