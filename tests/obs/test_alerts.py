"""The alert rules: `llmgw ctl alerts export`, promtool's check and unit tests, server init writing them."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from llmgw.cli.main import main
from llmgw.install.layout import Layout
from llmgw.obs.alerts import GROUPS, SEVERITIES, all_alerts
from llmgw.obs.monitoring_files import PACKAGED, RULES_FILE, rules_yaml

HERE = Path(__file__).resolve().parent
#: the promtool unit test files (tests/obs/*_test.yml), each naming llmgw-rules.yml beside it
UNIT_TESTS = sorted(HERE.glob("alerts*_test.yml"))


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus")
        pytest.skip("promtool is missing (apt-get install prometheus)")
    return found


def _load(path: Path):
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def test_ctl_alerts_export_prints_a_rules_file_promtool_accepts(tmp_path, capsys):
    assert main(["ctl", "alerts", "export"]) == 0
    printed = capsys.readouterr().out
    rules = tmp_path / "rules.yml"
    rules.write_text(printed)
    check = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(all_alerts())} rules found" in check.stdout

    groups = _load(rules)["groups"]
    assert [g["name"] for g in groups] == [g.name for g in GROUPS]
    for group in groups:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
            assert rule["annotations"]["summary"].strip(), rule["alert"]
            # what to do: a few sentences, not a restatement of the name
            assert len(rule["annotations"]["description"].split()) >= 15, rule["alert"]


def test_ctl_alerts_export_out_writes_the_file_and_refuses_a_folder(tmp_path, capsys):
    out = tmp_path / "llmgw-rules.yml"
    out.write_text("old")
    assert main(["ctl", "alerts", "export", "--out", str(out)]) == 0
    assert f"{out}: {len(all_alerts())} alert rules" in capsys.readouterr().out
    assert out.read_text() == rules_yaml()

    assert main(["ctl", "alerts", "export", "--out", str(tmp_path)]) == 2
    assert "is a folder; give the file to write" in capsys.readouterr().err
    assert main(["ctl", "alerts", "export", "--out", str(tmp_path / "nowhere" / "r.yml")]) == 2
    assert "does not exist; make it first" in capsys.readouterr().err


def test_the_packaged_rules_file_is_what_the_definitions_make():
    assert (PACKAGED / RULES_FILE).read_text(encoding="utf-8") == rules_yaml(), (
        "llmgw/obs/monitoring/ differs from the definitions; run `python -m llmgw.obs.monitoring_files`")


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    fires: dict[str, list[str]] = {}
    quiet: dict[str, list[str]] = {}
    for path in UNIT_TESTS:
        doc = _load(path)
        assert doc["rule_files"] == [RULES_FILE], path.name
        for case in doc["tests"]:
            for check in case["alert_rule_test"]:
                into = fires if check["exp_alerts"] else quiet
                into.setdefault(check["alertname"], []).append(case["name"])
                for expected in check["exp_alerts"]:
                    # the summary is rendered from the labels and value: each case says what it must read
                    assert expected["exp_annotations"]["summary"], case["name"]
                    assert set(expected["exp_annotations"]) == {"summary"}, case["name"]
    names = {a.name for a in all_alerts()}
    assert sorted(names - set(fires)) == [], "alerts no unit test fires"
    assert sorted(names - set(quiet)) == [], "alerts with no unit test where they stay quiet"
    assert sorted((set(fires) | set(quiet)) - names) == [], "unit tests of alerts that are not defined"


@pytest.mark.slow  # promtool evaluates every rule at each step: about 40 s on two cores
def test_promtool_unit_tests_of_every_alert_pass(tmp_path):
    """Each expected alert gets the description its definition has, its labels put in; then promtool runs."""
    (tmp_path / RULES_FILE).write_text(rules_yaml())
    descriptions = {a.name: a.description for a in all_alerts()}
    for name, text in descriptions.items():  # only labels: a value in a description would need promtool's maths
        assert not re.search(r"\{\{(?! \$labels\.\w+ \}\})", text), name
    yaml = YAML(typ="safe")
    written = []
    for path in UNIT_TESTS:
        doc = _load(path)
        for case in doc["tests"]:
            for check in case["alert_rule_test"]:
                for expected in check["exp_alerts"]:
                    labels = expected["exp_labels"]
                    expected["exp_annotations"]["description"] = re.sub(
                        r"\{\{ \$labels\.(\w+) \}\}", lambda m: str(labels[m.group(1)]),
                        descriptions[check["alertname"]])
        with open(tmp_path / path.name, "w", encoding="utf-8") as out:
            yaml.dump(doc, out)
        written.append(path.name)
    run = subprocess.run([promtool(), "test", "rules", *written], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert run.stdout.count("SUCCESS") == len(written), run.stdout


def test_server_init_dry_run_names_the_rules_file(tmp_path, capsys):
    root = tmp_path / "m"
    assert main(["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com", "--no-start",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"== {Layout(root).alert_rules} (mode 0644): the alert rules for Prometheus" in out
    assert not root.exists()


@pytest.mark.slow  # a real init: key pairs, the store's migrations, argon2 (~2 s)
def test_server_init_writes_the_rules_beside_server_yaml_and_keeps_an_edited_one(tmp_path, capsys):
    root = tmp_path / "m"
    argv = ["server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com", "--no-start",
            "--no-firewall"]
    assert main(argv) == 0
    L = Layout(root)
    assert L.alert_rules.parent == L.server_yaml.parent
    assert L.alert_rules.read_text() == rules_yaml()
    assert stat.S_IMODE(L.alert_rules.stat().st_mode) == 0o644  # Prometheus, another user, reads it
    assert f"{L.alert_rules}: wrote the alert rules" in capsys.readouterr().out

    L.alert_rules.write_text(rules_yaml() + "# mine\n")
    assert main(argv) == 0
    assert L.alert_rules.read_text().endswith("# mine\n")
    assert f"{L.alert_rules}: kept as it is" in capsys.readouterr().out
