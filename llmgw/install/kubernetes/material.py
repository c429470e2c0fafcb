"""The secrets a control plane in Kubernetes needs, made by the code `llmgw server init` uses.

The cluster CA (llmgw.pki.init_ca) stays on the operator's machine, under
--out/pki (or --ca's folder): nodes' certificates are issued from it there,
and the pods get only the CA's certificate, the server certificate and its
key. The admin token comes from llmgw.admin.token.ensure_token, the key-hash
secret is the 32 random bytes the server would make at its first start, and
the PostgreSQL password (with --store statefulset) is 24 random bytes.
"""

from __future__ import annotations

import secrets
import tempfile
import urllib.parse
from pathlib import Path

import attrs

from llmgw.install.kubernetes.options import KubeOptions, read_dsn

__all__ = ["Material", "make_material", "POSTGRES_USER", "POSTGRES_DB"]

POSTGRES_USER = "llmgw"
POSTGRES_DB = "llmgw"
KEY_HASH_BYTES = 32  # llmgw.auth.key_hash's secret


@attrs.frozen
class Material:
    ca_pem: str
    server_pem: str
    server_key_pem: str = attrs.field(repr=False)
    admin_token: str = attrs.field(repr=False)
    key_hash_secret: str = attrs.field(repr=False)  #: hex, as the server keeps it
    dsn: str = attrs.field(repr=False)
    postgres_password: str = attrs.field(default="", repr=False)  #: --store statefulset only

    def secret_values(self) -> list[str]:
        """Every value that must appear in no ConfigMap, no log and no command line."""
        values = [self.server_key_pem, self.admin_token, self.key_hash_secret, self.dsn]
        return [v for v in [*values, self.postgres_password] if v]


def postgres_host(opts: KubeOptions) -> str:
    return f"{opts.name}-postgres.{opts.namespace}.svc.cluster.local"


def make_material(opts: KubeOptions, pki_dir: Path) -> Material:
    """The secrets; a new CA is made in `pki_dir` unless --ca named one (then `pki_dir` is not touched)."""
    from llmgw.admin.token import ensure_token
    from llmgw.pki import init_ca, issue_server

    if opts.ca_dir:
        ca_dir = Path(opts.ca_dir)
    else:
        ca_dir = pki_dir
        ca_dir.mkdir(mode=0o700, parents=True)
        init_ca(ca_dir, name=f"llmgw cluster CA ({opts.name} in {opts.namespace})")
    with tempfile.TemporaryDirectory(prefix="llmgw-kube-") as scratch:
        tls = Path(scratch, "tls")
        issue_server(ca_dir, f"{opts.name} control plane", opts.cert_hosts(), tls)
        admin_token = ensure_token(Path(scratch, "admin-token"))
        server_pem = (tls / "server.pem").read_text(encoding="ascii")
        server_key = (tls / "server-key.pem").read_text(encoding="ascii")
        ca_pem = (tls / "ca.pem").read_text(encoding="ascii")
    password = ""
    if opts.store == "external":
        dsn = read_dsn(opts.dsn_file)
    else:
        password = secrets.token_urlsafe(24)
        dsn = (f"postgres://{POSTGRES_USER}:{urllib.parse.quote(password, safe='')}@{postgres_host(opts)}:5432/"
               f"{POSTGRES_DB}")
    return Material(ca_pem=ca_pem, server_pem=server_pem, server_key_pem=server_key, admin_token=admin_token,
                    key_hash_secret=secrets.token_bytes(KEY_HASH_BYTES).hex(), dsn=dsn, postgres_password=password)
