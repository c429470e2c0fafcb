"""Room on the disks the agent writes to: its state and the model weights."""

from __future__ import annotations

import os
from typing import Mapping

import attrs

# Where the agent writes by default (agent.yaml: state_dir, weights_dir).
DEFAULT_PATHS: Mapping[str, str] = {"state": "/var/lib/llmgw", "weights": "/var/lib/llmgw/weights"}


@attrs.frozen(kw_only=True)
class DiskInfo:
    """One directory's filesystem: how big, how much is free for the agent."""

    role: str  #: what the agent keeps there: "state", "weights"
    path: str  #: as configured
    measured_path: str  #: the path itself, or its nearest existing parent when not made yet
    mount_point: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None  #: available to an unprivileged writer (not root's reserve)
    error: str | None = None


def _mount_point(path: str) -> str | None:
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent
    return p


def read_disk(role: str, path: str) -> DiskInfo:
    """The filesystem `path` is (or will be, once made) on."""
    measured = os.path.abspath(path)
    # The weights directory may not exist until the first download: measure
    # the filesystem it will be made on.
    while not os.path.exists(measured) and os.path.dirname(measured) != measured:
        measured = os.path.dirname(measured)
    try:
        st = os.statvfs(measured)
    except OSError as e:
        return DiskInfo(role=role, path=path, measured_path=measured, error=f"{measured}: {e.strerror or e}")
    return DiskInfo(
        role=role,
        path=path,
        measured_path=measured,
        mount_point=_mount_point(measured),
        total_bytes=st.f_blocks * st.f_frsize,
        free_bytes=st.f_bavail * st.f_frsize,
    )


def read_disks(paths: Mapping[str, str] | None = None) -> tuple[DiskInfo, ...]:
    """Each role's directory, in the order given (DEFAULT_PATHS when None)."""
    return tuple(read_disk(role, path) for role, path in (DEFAULT_PATHS if paths is None else paths).items())
