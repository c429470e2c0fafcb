"""What llmgw made on a machine, kept in <state>/installed.json, so `llmgw wipe` removes that and nothing else.

Every installer (`server init`, `join`, `node add`) records here each
folder it created (removed whole by wipe: everything in it is llmgw's),
each file it wrote in a folder it did not create, each unit, the user it
added and whether it applied the firewall table. A folder that was already
there before llmgw is never in `dirs`, so wipe leaves it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from llmgw.install.layout import Layout

__all__ = ["Manifest", "make_dirs"]


@attrs.define
class Manifest:
    layout: Layout
    dirs: list[str] = attrs.Factory(list)  #: folders llmgw created: removed whole
    files: list[str] = attrs.Factory(list)  #: files llmgw wrote in folders it did not create
    parents: list[str] = attrs.Factory(list)  #: folders made on the way (like etc/systemd/system): removed when empty
    units: list[str] = attrs.Factory(list)  #: roles with a unit
    user: str | None = None  #: the system user llmgw added
    firewall: bool = False  #: the table inet llmgw was applied

    @classmethod
    def load(cls, layout: Layout) -> Manifest:
        """The manifest on this machine; an empty one when there is none (or it cannot be read)."""
        try:
            data: dict[str, Any] = json.loads(layout.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls(layout)
        return cls(
            layout,
            dirs=[str(p) for p in data.get("dirs", [])],
            files=[str(p) for p in data.get("files", [])],
            parents=[str(p) for p in data.get("parents", [])],
            units=[str(r) for r in data.get("units", [])],
            user=data.get("user") or None,
            firewall=bool(data.get("firewall", False)),
        )

    @property
    def exists(self) -> bool:
        return self.layout.manifest.exists()

    def _inside_made_dir(self, path: Path) -> bool:
        return any(path == Path(d) or Path(d) in path.parents for d in self.dirs)

    def add_dir(self, path: Path) -> None:
        if str(path) not in self.dirs and not self._inside_made_dir(path):
            self.dirs.append(str(path))

    def add_parent(self, path: Path) -> None:
        if str(path) not in self.parents:
            self.parents.append(str(path))

    def add_file(self, path: Path) -> None:
        if not self._inside_made_dir(path) and str(path) not in self.files:
            self.files.append(str(path))

    def add_unit(self, role: str) -> None:
        if role not in self.units:
            self.units.append(role)
        self.add_file(self.layout.unit(role))

    def save(self) -> None:
        data = {
            "dirs": self.dirs, "files": self.files, "parents": self.parents, "units": self.units,
            "user": self.user, "firewall": self.firewall,
        }
        path = self.layout.manifest
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def make_dirs(manifest: Manifest, path: Path, mode: int = 0o755, *, ours: bool = True) -> None:
    """mkdir -p, recording what was made: `ours` folders whole, the parents made on the way to be removed when empty."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for folder in reversed(missing):
        folder_mode = mode if folder == path else 0o755
        folder.mkdir(mode=folder_mode)
        os.chmod(folder, folder_mode)
        if folder == path and ours:
            manifest.add_dir(folder)
        else:
            manifest.add_parent(folder)
