"""The metric tables of docs/monitoring.md, written from llmgw/obs/metric_defs.py.

The page's own words stay as they are: only the part between the two marker lines is generated.
`python -m llmgw.obs.monitoring_doc docs/monitoring.md` rewrites it in place; tests/obs fail when it
is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmgw.obs.metric_defs import METRICS, sections

BEGIN = "<!-- metrics: generated from llmgw/obs/metric_defs.py by `python -m llmgw.obs.monitoring_doc` -->"
END = "<!-- end of the generated metrics -->"

_WHERE = {
    "all": "every role",
    "server": "server",
    "relayed": "server (leader), relayed",
    "agent": "agent",
    "mirror": "mirror",
}


def metric_tables() -> str:
    """Every metric, a table per section: name, type, labels, where, meaning."""
    out: list[str] = []
    for section in sections():
        out.append(f"### {section}\n")
        out.append("| metric | type | labels | where | meaning |")
        out.append("|---|---|---|---|---|")
        for m in METRICS:
            if m.section != section:
                continue
            labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
            where = ", ".join(_WHERE[r] for r in m.roles)
            out.append(f"| `{m.name}` | {m.type} | {labels} | {where} | {m.help.replace('|', '/')} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def with_tables(page: str) -> str:
    """`page` with its generated part written again; ValueError when the markers are missing."""
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/monitoring.md: the lines {BEGIN!r} and {END!r} must both be there, in that order")
    return page[: start + len(BEGIN)] + "\n\n" + metric_tables() + "\n" + page[end:]


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "docs/monitoring.md")
    path.write_text(with_tables(path.read_text()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
