"""The monitoring files llmgw ships, rendered from their definitions in code.

- `llmgw-rules.yml`: the alert rules (llmgw.obs.alerts), for Prometheus' `rule_files`;
- `llmgw-cluster.json`, `llmgw-tenants.json`: the Grafana dashboards (llmgw.obs.dashboards).

The same files are kept in the package (llmgw/obs/monitoring/, so they travel
in the zipapp and can be read without running llmgw); tests/obs checks they
are what the definitions render. After changing a definition:

    python -m llmgw.obs.monitoring_files
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

RULES_FILE = "llmgw-rules.yml"
PACKAGED = Path(__file__).resolve().parent / "monitoring"

_RULES_HEADER = (
    "# llmgw's alert rules, for Prometheus' rule_files. Made by `llmgw ctl alerts export` from the\n"
    "# definitions in llmgw/obs/alerts.py; docs/monitoring.md says what each alert means and what to do.\n"
)


def rules_yaml() -> str:
    """The alert rules as a Prometheus rules file: long expressions and descriptions as folded blocks."""
    from llmgw.obs.alerts import rules_document

    lines = [_RULES_HEADER.rstrip("\n"), "groups:"]
    for group in rules_document()["groups"]:
        lines += [f"  - name: {group['name']}", "    rules:"]
        for rule in group["rules"]:
            lines.append(f"      - alert: {rule['alert']}")
            lines += _folded("        expr", rule["expr"])
            lines.append(f"        for: {rule['for']}")
            lines.append("        labels:")
            lines += [f"          {k}: {v}" for k, v in rule["labels"].items()]
            lines.append("        annotations:")
            for key, text in rule["annotations"].items():
                lines += _folded(f"          {key}", text)
    return "\n".join(lines) + "\n"


def _folded(key: str, text: str, width: int = 100) -> list[str]:
    """`key: "text"` when it fits on the line, else a `>-` block (its lines joined by spaces when read)."""
    one = f"{key}: {json.dumps(text, ensure_ascii=False)}"
    if len(one) <= width:
        return [one]
    indent = " " * (len(key) - len(key.lstrip()) + 2)
    wrapped = textwrap.wrap(text, width=width - len(indent), break_long_words=False, break_on_hyphens=False)
    return [f"{key}: >-", *(indent + line for line in wrapped)]


def dashboard_files() -> dict[str, str]:
    """Each dashboard's file name and its Grafana JSON."""
    from llmgw.obs.dashboards import DASHBOARDS, grafana_json

    return {f"{d.uid}.json": json.dumps(grafana_json(d), indent=2, ensure_ascii=False) + "\n" for d in DASHBOARDS}


def all_files() -> dict[str, str]:
    return {RULES_FILE: rules_yaml(), **dashboard_files()}


def write_file(path: Path, text: str) -> None:
    """Write `text` to `path` whole: a reader (Prometheus reloading, Grafana provisioning) never sees half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_packaged() -> list[Path]:  # pragma: no cover - run by hand after changing a definition
    PACKAGED.mkdir(exist_ok=True)
    written = []
    for name, text in all_files().items():
        write_file(PACKAGED / name, text)
        written.append(PACKAGED / name)
    return written


if __name__ == "__main__":  # pragma: no cover
    for path in write_packaged():
        print(path)
