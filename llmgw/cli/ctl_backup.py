"""`llmgw ctl backup|backups`: make a backup archive on the control plane now, list the archives kept."""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, register_leaf

#: Seconds a backup may take before ctl stops waiting (the archive is still made).
BACKUP_TIMEOUT = 3600.0


def register(sub) -> None:
    p = sub.add_parser("backup", help="Back up the store and the configuration now, on the control plane.",
                       description="Make a backup archive now on the control plane (as `llmgw server backup` "
                       "there): the store, the folder server.yaml is in and the files it names, written mode "
                       "0600 into backup.dir. Prints its path, size and sha256.")
    register_leaf(p, run_backup)
    p = sub.add_parser("backups", help="List the backup archives on the control plane.",
                       description="The archives in the control plane's backup folder, newest first.")
    register_leaf(p, run_backups, actor_flag=False)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def run_backup(args: argparse.Namespace, client: AdminClient) -> int:
    client.timeout = max(client.timeout, BACKUP_TIMEOUT)
    made = client.post("/backups")
    if args.json:
        print_json(made)
        return 0
    print(made["path"])
    print(f"  size     {_size(made['size'])} ({made['size']} bytes)")
    print(f"  sha256   {made['sha256']}")
    config = f"{made['config_files']} configuration file(s) from {made['config_dir']}" if made["config_dir"] \
        else "no configuration (the server was not started from a file)"
    print(f"  holds    the {made['store']} store (schema version {made['schema_version']}) and {config}")
    for where in made.get("copies") or []:
        print(f"  copied   {where}")
    if made["removed"]:
        print(f"  removed  {', '.join(made['removed'])}")
    if not made.get("encrypted"):
        print("It is not encrypted and holds key and password hashes and private keys: set backup.encrypt_to.")
    return 0


def run_backups(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/backups")
    if args.json:
        print_json(answer)
        return 0
    print(f"{answer['dir']} (keeping {answer['keep'] or 'every one'})")
    if not answer.get("encrypted"):
        print("  NOT ENCRYPTED: the archives hold key and password hashes and private keys in clear; set "
              "backup.encrypt_to")
    for where in answer.get("copy_to") or []:
        print(f"  copied to {where}")
    if answer.get("schedule"):
        due = (answer.get("next_due") or "")[:19].replace("T", " ")
        print(f"  scheduled {answer['schedule']}; the next at {due} UTC")
        last = answer.get("last_scheduled")
        if last is None:
            print("  last scheduled backup: none yet since this server started")
        elif last["ok"]:
            print(f"  last scheduled backup: ok at {last['at'][:19].replace('T', ' ')}: {last['archive']}")
        else:
            print(f"  last scheduled backup: FAILED at {last['at'][:19].replace('T', ' ')}: {last['error']}")
    rows = [{"name": b["name"], "made": b["created"][:19].replace("T", " "), "size": _size(b["size"]),
             "sha256": b["sha256"] or "-"} for b in answer["backups"]]
    print_table(rows, ["name", "made", "size", "sha256"])
    return 0
