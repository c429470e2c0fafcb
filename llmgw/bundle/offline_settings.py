"""server.yaml's `mirror.offline`: what a cluster at a site with no way out must not ask for.

Checked with the rest of server.yaml (config/validate.py): with
`mirror.offline: true` the nodes must have a mirror to fetch weights from
(`mirror.url`), and no model may name weights at an address outside it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["problems", "source_problem"]


def source_problem(mirror: Any, source: str) -> str:
    """Why a model's `source` may not be used at an offline site (`mirror`: server.yaml's mirror); empty if it may."""
    source = (source or "").strip()
    base = mirror.url.rstrip("/")
    if not mirror.offline or not source.startswith(("http://", "https://")):
        return ""
    if base and (source == base or source.startswith(base + "/")):
        return ""
    return (f"{source}: outside the mirror, and mirror.offline is true (nothing is fetched from outside); bring "
            "the model in a bundle and name it mirror:MODEL/VERSION/FILE")


def problems(config: Any) -> list[tuple[tuple, str]]:
    if not config.mirror.offline:
        return []
    found: list[tuple[tuple, str]] = []
    if not config.mirror.url.rstrip("/"):
        found.append((("mirror", "offline"), "true, but mirror.url is empty: an offline cluster's nodes fetch "
                      "weights only from its mirror; set mirror.url (docs/releases.md)"))
    for index, model in enumerate(config.models):
        problem = source_problem(config.mirror, model.source or "")
        if problem:
            found.append((("models", index, "source"), problem))
    return found
