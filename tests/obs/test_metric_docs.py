"""docs/monitoring.md lists every metric of llmgw/obs/metric_defs.py, as the code writes the table."""

from pathlib import Path

from llmgw.obs.metric_defs import METRICS, TYPES, ROLES
from llmgw.obs.monitoring_doc import with_tables

PAGE = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def test_docs_monitoring_md_metric_tables_are_up_to_date():
    page = PAGE.read_text()
    assert with_tables(page) == page, (
        "docs/monitoring.md's metric tables differ from llmgw/obs/metric_defs.py; "
        "run `python -m llmgw.obs.monitoring_doc docs/monitoring.md`")


def test_every_metric_is_named_once_with_a_known_type_and_role():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for m in METRICS:
        assert m.type in TYPES, m.name
        assert set(m.roles) <= set(ROLES), m.name
        assert m.help.endswith("."), m.name
        assert (m.type == "counter") == m.name.endswith("_total"), m.name
        assert f"`{m.name}`" in PAGE.read_text()
