"""What is wrong with a configuration file, said so an operator can fix it."""

from __future__ import annotations

import re
from typing import Iterable

import attrs

__all__ = ["ConfigError", "Problem", "format_path"]

Path = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(path: Path) -> str:
    """`router.timeouts.dial`, `models[2].profiles[0].gpus`, `labels["llmgw.io/rack"]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out


@attrs.frozen
class Problem:
    """One thing wrong: where (a path of keys and indexes), what, and the line when known."""

    path: Path
    message: str
    line: int | None = attrs.field(default=None, eq=False)

    def __str__(self) -> str:
        where = format_path(self.path)
        return f"{where}: {self.message}" if where else self.message

    def located(self, source: str = "") -> str:
        """`server.yaml:12: router.timeouts.dial: ...`, as compilers and editors expect."""
        if source and self.line is not None:
            return f"{source}:{self.line}: {self}"
        if source:
            return f"{source}: {self}"
        if self.line is not None:
            return f"line {self.line}: {self}"
        return str(self)


class ConfigError(Exception):
    """A configuration that cannot be used; `.problems` says every reason, one a line."""

    def __init__(self, problems: Iterable[Problem | str], source: str = "") -> None:
        self.details: list[Problem] = [p if isinstance(p, Problem) else Problem((), p) for p in problems]
        self.source = source
        #: Each problem as `dotted.path: what is wrong`.
        self.problems: list[str] = [str(p) for p in self.details]
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(p.located(self.source) for p in self.details)
