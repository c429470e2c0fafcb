"""The alert and dashboard lists of docs/monitoring.md, written from llmgw/obs/alerts.py and dashboards.py.

Only the parts between the marker lines are generated; the page's own words around them stay.
`python -m llmgw.obs.alerts_doc docs/monitoring.md` rewrites them in place; tests/obs fail when they
are out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from llmgw.obs.alerts import GROUPS
from llmgw.obs.dashboards import DASHBOARDS

ALERTS_BEGIN = "<!-- alerts: generated from llmgw/obs/alerts.py by `python -m llmgw.obs.alerts_doc` -->"
ALERTS_END = "<!-- end of the generated alerts -->"
DASHBOARDS_BEGIN = "<!-- dashboards: generated from llmgw/obs/dashboards.py by `python -m llmgw.obs.alerts_doc` -->"
DASHBOARDS_END = "<!-- end of the generated dashboards -->"


def _words(text: str) -> str:
    """An annotation as the docs say it: `{{ $labels.node }}` is *node*, `{{ $value … }}` is *value*."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: f"*{m.group(1)}*", text)
    return re.sub(r"\{\{ \$value[^}]*\}\}", "*value*", text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def alerts_markdown() -> str:
    out: list[str] = []
    for group in GROUPS:
        out += [f"### {group.name}", "", group.about, "", "| alert | severity | fires when | what to do |",
                "|---|---|---|---|"]
        for a in group.alerts:
            wait = "at once" if a.wait == "0m" else f"for {a.wait}"
            out.append(f"| **{a.name}**: {_cell(_words(a.summary))} | {a.severity} | `{_cell(a.expr)}` {wait} "
                       f"| {_cell(_words(a.description))} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def dashboards_markdown() -> str:
    out: list[str] = []
    for d in DASHBOARDS:
        out += [f"### {d.title} (`{d.uid}.json`)", "", d.description, ""]
        for row in d.rows:
            out += [f"- **{row.title}**"]
            out += [f"  - {p.title} ({p.unit}): {p.description}" for p in row.panels]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _between(page: str, begin: str, end: str, body: str) -> str:
    start, stop = page.find(begin), page.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"docs/monitoring.md: the lines {begin!r} and {end!r} must both be there, in that order")
    return page[: start + len(begin)] + "\n\n" + body + "\n" + page[stop:]


def with_lists(page: str) -> str:
    """`page` with its generated alert and dashboard lists written again."""
    page = _between(page, ALERTS_BEGIN, ALERTS_END, alerts_markdown())
    return _between(page, DASHBOARDS_BEGIN, DASHBOARDS_END, dashboards_markdown())


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "docs/monitoring.md")
    path.write_text(with_lists(path.read_text()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
