"""The control plane's own folder on its disk, for what must survive a restart
beside the store: the usage journal (llmgw.accounting.journal) and the
instance id it leads under (llmgw.control.leader).

It is the folder of a SQLite store's file, or /var/lib/llmgw with
PostgreSQL (LLMGW_STATE_DIR, when set, names another); None for an in-memory
store or when that folder is missing.
"""

from __future__ import annotations

import os

from . import parse_dsn
from .errors import Invalid

#: The folder used with a PostgreSQL store.
POSTGRES_STATE_DIR = "/var/lib/llmgw"
#: The environment variable naming another folder for a PostgreSQL store: each control plane of several on one
#: machine (a test, a benchmark) needs its own, or they would share one usage journal.
STATE_DIR_ENV = "LLMGW_STATE_DIR"


def _postgres_state_dir() -> str:  # LLMGW_STATE_DIR
    return os.environ.get(STATE_DIR_ENV) or POSTGRES_STATE_DIR


def state_dir(dsn: str) -> str | None:
    try:
        kind, where = parse_dsn(dsn)
    except Invalid:
        return None
    if kind == "postgres":
        folder = _postgres_state_dir()  # LLMGW_STATE_DIR
    elif where is None:
        return None
    else:
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(where)))
    return folder if os.path.isdir(folder) else None


def state_dir_of(store: object) -> str | None:
    """The state folder of an open store: its SQLite file's folder, or /var/lib/llmgw with PostgreSQL."""
    if getattr(store, "dialect", "") == "postgres":
        folder = _postgres_state_dir()  # LLMGW_STATE_DIR
    else:
        path = getattr(store, "path", None)
        if not isinstance(path, str) or not path:
            return None
        folder = os.path.dirname(os.path.abspath(path))
    return folder if os.path.isdir(folder) else None
