"""Do → Replicate the store: `llmgw server init --patroni` as a form, on the machine the console runs on.

The form's fields are the command's options; each is checked by the same
code (llmgw/install/patroni.py: `parse_members`, then `plan` for them all
together), a mistake said under its field with nothing written. Once every
field is right the same files are written (`write_cluster`) and the panel
says what the command prints: for each machine the folder to copy there and
the `install.sh` to run, and the store's address for server.yaml.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmgw.console.views.base import TextView

__all__ = ["FIELD_OF_OPTION", "ReplicateView"]

#: The form's field for each option a refusal of `plan` names.
FIELD_OF_OPTION = {"--members": "members", "--etcd": "etcd", "--out": "out", "--ca": "ca", "--pg-bin": "pg_bin",
                   "--clients": "clients", "--client-ca": "client_ca"}


class ReplicateView(TextView):
    title = "Replicate the store"
    contexts = ("do", "text")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: list[Any] = []  #: what the last write said to do, shown below the explanation

    def lines(self) -> list[Any]:
        out: list[Any] = [
            ("title", "Replicate the store"), "",
            ("PostgreSQL under Patroni on two or more machines, with etcd (an odd number of votes) holding the "
             "leader lock, TLS between them all from the cluster CA. The console writes, on this machine, a folder "
             "for each machine with its configuration, certificates, passwords and install.sh, and the store's "
             "address listing every member. Nothing is started here: copy each folder to its machine and run its "
             "install.sh there as root; then give the control planes the address."), "",
            ("dim", "Enter opens the form. From a shell: llmgw server init --patroni --members … (docs/store.md)."),
        ]
        if self.written:
            out += ["", ("heading", "Written"), *self.written]
        return out

    def commands(self) -> dict[str, Callable[[], None]]:
        return {"act": self.act}

    def act(self) -> None:
        from llmgw.console.widgets.form import TextField, text
        from llmgw.install.layout import Layout
        from llmgw.install.patroni import find_bin_dir

        root = Layout(Path("/"))
        fields = [TextField("members", "Members", "", _members,
                            hint="NAME=HOST[:PG_PORT[:API_PORT]], comma-separated, two or more"),
                  TextField("etcd", "etcd members", "", text("etcd members"),
                            hint="NAME=HOST[:CLIENT_PORT[:PEER_PORT]], an odd number; empty: one on each member"),
                  TextField("out", "Write into", str(Path(os.getcwd()) / "llmgw-patroni"),
                            text("Write into", required=True), hint="an empty folder on this machine"),
                  TextField("ca", "Cluster CA", str(root.ca_dir), text("Cluster CA", required=True),
                            hint="the folder with ca.pem and ca-key.pem that signs the members' certificates"),
                  TextField("client_ca", "CA for clients", str(root.tls / "ca.pem"),
                            text("CA for clients", required=True),
                            hint="where the control planes find the CA certificate (the address's sslrootcert)"),
                  TextField("pg_bin", "PostgreSQL bin", find_bin_dir() or "", text("PostgreSQL bin"),
                            hint="the members' PostgreSQL binaries, with initdb"),
                  TextField("clients", "Clients", "", text("Clients"),
                            hint="CIDRs the control planes connect from, comma-separated; empty: every member")]
        self.app.form("Replicate the store", fields, self.write, done=self.done, apply_label="Write",
                      intro=["The same checks and files as llmgw server init --patroni; nothing is written until "
                             "every field is right."])

    def write(self, values: dict[str, Any]) -> Any:
        """Check every field together (`plan`), then the write, in a thread; FieldError names the field."""
        from llmgw.console.widgets.form import FieldError
        from llmgw.install.patroni import PatroniError, plan

        clients = [c for c in (values["clients"] or "").replace(",", " ").split() if c]
        try:
            p = plan(members=values["members"], etcd=values["etcd"], out=values["out"], ca_dir=values["ca"],
                     client_ca=values["client_ca"], bin_dir=values["pg_bin"], clients=clients)
        except PatroniError as exc:
            raise FieldError(FIELD_OF_OPTION.get(exc.option, ""), f"{exc}; nothing was written") from None
        return _write(p)

    def done(self, lines: list[str]) -> None:
        self.written = [("good", lines[0]), *lines[1:]] if lines else []
        self.refresh()
        self.app.show("The store's files are written", lines)


def _members(value: str) -> str:
    """The members field, checked as --members is."""
    from llmgw.install.patroni import PatroniError, parse_members

    try:
        parse_members(value)
    except PatroniError as exc:
        raise ValueError(str(exc)) from None
    return value.strip()


async def _write(p: Any) -> list[str]:
    from llmgw.console.model import AdminError
    from llmgw.install.patroni import PatroniError, write_cluster, written_lines

    try:
        written = await asyncio.to_thread(write_cluster, p)
    except (PatroniError, OSError) as exc:
        raise AdminError(f"{exc}") from None
    return written_lines(p, written)
