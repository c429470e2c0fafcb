"""The Grafana dashboards: `llmgw ctl dashboards export`, their layout, and that every query is PromQL
over metrics llmgw exports. tests/obs/test_monitoring_prometheus.py runs each against a real Prometheus."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from llmgw.cli.main import main
from llmgw.obs.alerts import all_alerts
from llmgw.obs.dashboards import DASHBOARDS, all_queries
from llmgw.obs.metric_defs import METRICS
from llmgw.obs.monitoring_files import PACKAGED, dashboard_files

#: what a query may name besides llmgw's own metrics: Prometheus' own `up`
PROMETHEUS_SERIES = {"up"}


def grafana_variables_filled(expr: str) -> str:
    """A panel's query as Grafana sends it with every variable at its "All" value."""
    return expr.replace("$tenant", ".*")


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression reads (names of functions and label values left out)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "", without_strings)
    without_modifiers = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                               without_labels)
    names = set(re.findall(r"\b[a-z_][a-z0-9_]*\b(?!\s*\()", without_modifiers))
    return {n for n in names if n.startswith(("llmgw_", "process_")) or n in PROMETHEUS_SERIES}


def _defined(name: str) -> bool:
    known = {m.name for m in METRICS} | PROMETHEUS_SERIES
    histograms = {m.name for m in METRICS if m.type == "histogram"}
    base = re.sub(r"_(bucket|count|sum)$", "", name)
    return name in known or base in histograms


def test_ctl_dashboards_export_writes_each_dashboard_as_grafana_json(tmp_path, capsys):
    out = tmp_path / "grafana"
    out.mkdir()
    (out / "llmgw-tenants.json").write_text("an older one")
    assert main(["ctl", "dashboards", "export", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "llmgw-cluster.json"), str(out / "llmgw-tenants.json")]
    for d in DASHBOARDS:
        model = json.loads((out / f"{d.uid}.json").read_text())
        assert (model["uid"], model["title"]) == (d.uid, d.title)
        [source] = [v for v in model["templating"]["list"] if v["name"] == "datasource"]
        assert source["type"] == "datasource" and source["query"] == "prometheus"
        panels = [p for p in model["panels"] if p["type"] != "row"]
        assert [t["expr"] for p in panels for t in p["targets"]] == [q.expr for _, q in all_queries(d)]
        for p in panels:
            assert p["datasource"]["uid"] == "${datasource}" and p["fieldConfig"]["defaults"]["unit"], p["title"]
            assert p["description"], p["title"]

    (tmp_path / "afile").write_text("")
    assert main(["ctl", "dashboards", "export", str(tmp_path / "afile")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_the_packaged_dashboards_are_what_the_definitions_make():
    for name, text in dashboard_files().items():
        assert (PACKAGED / name).read_text(encoding="utf-8") == text, (
            f"llmgw/obs/monitoring/{name} differs from llmgw/obs/dashboards.py; "
            "run `python -m llmgw.obs.monitoring_files`")


def test_panels_fill_grafanas_grid_without_overlapping():
    for name, text in dashboard_files().items():
        taken: set[tuple[int, int]] = set()
        for p in json.loads(text)["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, (name, p["title"])
            cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & taken, (name, p["title"])
            taken |= cells


def test_every_query_is_promql_promtool_accepts(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is missing (apt-get install prometheus)")
    lines = ["groups:", "  - name: dashboard-queries", "    rules:"]
    for d in DASHBOARDS:
        for i, (_, q) in enumerate(all_queries(d)):
            lines += [f"      - record: {d.uid.replace('-', '_')}:query_{i}",
                      f"        expr: {json.dumps(grafana_variables_filled(q.expr))}"]
    rules = tmp_path / "queries.yml"
    rules.write_text("\n".join(lines) + "\n")
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_metric_a_panel_or_an_alert_reads_is_one_llmgw_exports():
    read = {f"dashboard {d.uid}, {title}": metric_names(q.expr) for d in DASHBOARDS for title, q in all_queries(d)}
    read |= {f"alert {a.name}": metric_names(a.expr) for a in all_alerts()}
    assert all(read.values()), [where for where, names in read.items() if not names]
    unknown = {where: sorted(n for n in names if not _defined(n)) for where, names in read.items()}
    assert {k: v for k, v in unknown.items() if v} == {}, "not in llmgw/obs/metric_defs.py"


def test_metric_names_are_read_from_queries():
    assert metric_names('sum by (model, le) (rate(llmgw_ttft_seconds_bucket{tenant=~"a|b"}[5m])) > 0.5') == {
        "llmgw_ttft_seconds_bucket"}
    assert metric_names("llmgw_a / on (node) group_left (model) llmgw_b or vector(0)") == {"llmgw_a", "llmgw_b"}


def test_docs_monitoring_md_lists_every_alert_and_every_panel():
    from pathlib import Path

    from llmgw.obs.alerts_doc import with_lists

    page = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text(encoding="utf-8")
    assert with_lists(page) == page, (
        "docs/monitoring.md's alerts or dashboards differ from llmgw/obs; "
        "run `python -m llmgw.obs.alerts_doc docs/monitoring.md`")
    for a in all_alerts():
        assert f"| **{a.name}**:" in page
