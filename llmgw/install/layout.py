"""Where an installed llmgw keeps its files on a machine (or under `--root DIR`).

    /etc/llmgw/                 server.yaml, agent.yaml, mirror.yaml, llmgw-rules.yml (alert rules)
    /etc/llmgw/ca/              the cluster CA: ca.pem, ca-key.pem (control planes only, root only)
    /etc/llmgw/tls/             ca.pem, server.pem, node.pem and their keys
    /var/lib/llmgw/             the store (SQLite), the admin token, pid files, installed.json
    /var/log/llmgw/             one log per role when started without systemd
    /etc/systemd/system/        llmgw-server.service, llmgw-agent.service, llmgw-mirror.service
    /usr/local/lib/llmgw/       llmgw.pyz, the file every unit runs
    /etc/nftables.d/llmgw.nft   the firewall table `inet llmgw`

`--root DIR` puts every one of them under DIR, so a test (or a dry look) never
touches the machine's own /etc.
"""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = ["Layout", "ROLES"]

#: The roles a machine may run, each as one service.
ROLES = ("server", "agent", "mirror")


@attrs.frozen
class Layout:
    root: Path = attrs.field(default=Path("/"), converter=lambda p: Path(p).absolute())

    @property
    def system(self) -> bool:
        """True for the machine itself (root /), where systemd and the firewall are the real ones."""
        return self.root == Path("/")

    @property
    def etc(self) -> Path:
        return self.root / "etc/llmgw"

    @property
    def state(self) -> Path:
        return self.root / "var/lib/llmgw"

    @property
    def logs(self) -> Path:
        return self.root / "var/log/llmgw"

    @property
    def units(self) -> Path:
        return self.root / "etc/systemd/system"

    @property
    def binary(self) -> Path:
        return self.root / "usr/local/lib/llmgw/llmgw.pyz"

    @property
    def nft(self) -> Path:
        return self.root / "etc/nftables.d/llmgw.nft"

    # --- files inside those folders ---------------------------------------

    @property
    def tls(self) -> Path:
        return self.etc / "tls"

    @property
    def ca_dir(self) -> Path:
        """The cluster CA (ca.pem, ca-key.pem), root's only (0700): control planes only."""
        return self.etc / "ca"

    @property
    def store_dsn_file(self) -> Path:
        """A PostgreSQL address with its password, 0600, named by server.yaml as file:PATH."""
        return self.etc / "store-dsn"

    @property
    def server_yaml(self) -> Path:
        return self.etc / "server.yaml"

    @property
    def agent_yaml(self) -> Path:
        return self.etc / "agent.yaml"

    @property
    def alert_rules(self) -> Path:
        """llmgw's alert rules for Prometheus (`llmgw ctl alerts export`), written by server init."""
        return self.etc / "llmgw-rules.yml"

    @property
    def store(self) -> Path:
        return self.state / "llmgw.db"

    @property
    def admin_token(self) -> Path:
        return self.state / "admin-token"

    @property
    def manifest(self) -> Path:
        """What llmgw made on this machine, so `wipe` removes that and nothing else."""
        return self.state / "installed.json"

    def unit(self, role: str) -> Path:
        return self.units / f"llmgw-{role}.service"

    def pid_file(self, role: str) -> Path:
        return self.state / f"llmgw-{role}.pid"

    def log_file(self, role: str) -> Path:
        return self.logs / f"{role}.log"
