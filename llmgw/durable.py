"""Making a rename durable: the folder's own entry written to disk, not just the file's contents.

A file written and renamed into place (`os.replace`) survives a power cut
only once the folder holding the new name is synced too. Backups, restores
and the agent's replacement of its own program do this after each rename.
"""

from __future__ import annotations

import os

__all__ = ["fsync_dir"]


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename in `folder` durable (where the platform allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
