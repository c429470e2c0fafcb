"""What an operator should hear about this server's backups: in `llmgw doctor`, and in the server's log at start.

    for level, text in backup_advice(config): ...   # ("ok" | "warn" | "problem", one sentence)

Archives in clear hold the admin token, every key's and password's hash,
the TLS private keys and whatever file: secrets server.yaml names; this
says so (naming the settings, never a secret), and says when archives stay
on the machine they protect or are made only when someone asks.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["backup_advice", "CLEAR_WARNING"]

CLEAR_WARNING = ("backups are not encrypted: each archive would hold the admin token, key and password hashes "
                 "and TLS private keys in clear; set backup.encrypt_to (llmgw server backup keygen makes a key) "
                 "or backup.passphrase_file")


def backup_advice(config: Any) -> list[tuple[str, str]]:
    """(ok | warn | problem, sentence) for backup.*; settings already passed the configuration's checks."""
    b = config.backup
    out: list[tuple[str, str]] = []
    if b.passphrase_file and not os.access(os.path.expanduser(b.passphrase_file), os.R_OK):
        out.append(("problem", f"backup.passphrase_file {b.passphrase_file} cannot be read by this user: every "
                               "backup would fail; create it (mode 0600) with the passphrase on its first line"))
    elif b.encrypt_to:
        out.append(("ok", f"backups are encrypted to {len(b.encrypt_to)} age recipient(s) (backup.encrypt_to)"))
    elif b.passphrase_file:
        out.append(("ok", "backups are encrypted with the passphrase of backup.passphrase_file"))
    else:
        out.append(("warn", CLEAR_WARNING))
    if b.copy_to:
        out.append(("ok", f"each backup is copied to {', '.join(b.copy_to)}"))
    else:
        out.append(("warn", "backups stay on this machine's disk, lost with it: set backup.copy_to (a folder on "
                            "another disk, ssh://user@host/path or s3://bucket/prefix)"))
    if b.schedule:
        from llmgw.backup.schedule import parse_schedule

        out.append(("ok", f"the server backs up {parse_schedule(b.schedule)}, keeping {b.keep or 'every one'}"))
    else:
        out.append(("warn", "no backup.schedule: backups are made only when asked (llmgw server backup, ctl "
                            "backup, or a timer of your own)"))
    return out
