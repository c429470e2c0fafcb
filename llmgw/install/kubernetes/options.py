"""What `llmgw server kube` was asked for, and every problem with it, each naming its option."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import attrs

from llmgw.hostnames import is_host, url_host

__all__ = ["KubeError", "KubeOptions", "check_options", "default_image", "read_dsn", "AGENT_SERVICE_TYPES",
           "CLIENT_SERVICE_TYPES", "STORES"]

STORES = ("statefulset", "external")
AGENT_SERVICE_TYPES = ("LoadBalancer", "NodePort")
CLIENT_SERVICE_TYPES = ("ClusterIP", "LoadBalancer", "NodePort")
MAX_REPLICAS = 9
NODE_PORTS = range(30000, 32768)  # Kubernetes' default --service-node-port-range
#: A resource name the others are made from ("-agents-0", "-postgres"): short enough that each stays a DNS label.
MAX_NAME = 40

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")


class KubeError(Exception):
    """The options cannot be used; `problems` are sentences naming the option and what to do."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def default_image() -> str:
    """The tag the Dockerfile's docs build: llmgw:VERSION of this very llmgw."""
    from llmgw.buildinfo import build_info

    return f"llmgw:{build_info()['version']}"


@attrs.frozen
class KubeOptions:
    out: Path = attrs.field(converter=lambda p: Path(p).absolute())
    namespace: str = "llmgw"
    name: str = "llmgw"
    replicas: int = 2
    store: str = "statefulset"  #: statefulset: a PostgreSQL pod made here; external: --dsn-file's
    dsn_file: str = ""
    image: str = ""  #: "" is default_image()
    postgres_image: str = "postgres:17"
    storage: str = "20Gi"  #: the PostgreSQL StatefulSet's claim
    storage_class: str = ""
    agent_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=tuple)
    agent_service: str = "LoadBalancer"
    agent_port: int = 7443
    agent_node_port: int = 30743  #: NodePort: control plane i's agent port is this plus i
    client_service: str = "ClusterIP"
    ca_dir: str = ""  #: an existing cluster CA (ca.pem, ca-key.pem); "" makes a new one under out/pki
    helm: bool = False  #: the chart and its values instead of the resources it makes (the Secrets stay manifests)

    @property
    def image_ref(self) -> str:
        return self.image or default_image()

    def pod_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def agent_service_name(self, index: int) -> str:
        return f"{self.name}-agents-{index}"

    def agent_addresses(self) -> list[str]:
        """What agents outside dial, one per control plane and address: https://HOST:PORT."""
        hosts = [url_host(h) for h in self.agent_hosts]
        if self.agent_service == "LoadBalancer":
            return [f"https://{host}:{self.agent_port}" for host in hosts]
        return [f"https://{host}:{self.agent_node_port + i}" for i in range(self.replicas) for host in hosts]

    def advertised(self) -> list[str]:
        """Each control plane's agent_advertise (HOST:PORT), in pod order: its own agent Service as agents outside
        reach it, which the leader sends every agent (with NodePort, through the first --agent-host)."""
        hosts = [url_host(h) for h in self.agent_hosts]
        if not hosts:
            return []
        if self.agent_service == "LoadBalancer":
            return [f"{host}:{self.agent_port}" for host in hosts[:self.replicas]]
        return [f"{hosts[0]}:{self.agent_node_port + i}" for i in range(self.replicas)]

    def in_cluster_names(self) -> list[str]:
        """The agent Services' names inside the cluster, which the server certificate carries too."""
        names = []
        for i in range(self.replicas):
            svc = self.agent_service_name(i)
            names += [f"{svc}.{self.namespace}.svc", f"{svc}.{self.namespace}.svc.cluster.local"]
        return names

    def cert_hosts(self) -> list[str]:
        """The server certificate's names: what agents dial, the Services' names, and loopback for the pod."""
        hosts = [h.strip().strip("[]") for h in self.agent_hosts] + self.in_cluster_names() + ["127.0.0.1", "localhost"]
        return list(dict.fromkeys(hosts))



def _host_problem(host: str) -> str | None:
    if not is_host(host):
        return f"--agent-host {host!r}: neither an IP address nor a DNS name; give one address agents dial per --agent-host"
    return None


def read_dsn(path: str) -> str:
    """The PostgreSQL address in --dsn-file, stripped; OSError or ValueError saying why it cannot be used."""
    text = Path(path).read_text(encoding="utf-8").strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("postgres", "postgresql") or not parts.hostname:
        raise ValueError("does not hold a PostgreSQL address (postgres://USER:PASSWORD@HOST:5432/DB)")
    return text


def check_options(opts: KubeOptions) -> list[str]:
    """Every problem, as sentences; empty when the manifests may be written."""
    problems: list[str] = []
    if opts.out.exists() and (not opts.out.is_dir() or any(opts.out.iterdir())):
        problems.append(f"--out {opts.out}: exists and is not an empty folder; give a new one (nothing is written over)")
    for flag, value, limit in (("--namespace", opts.namespace, 63), ("--name", opts.name, MAX_NAME)):
        if not _DNS_LABEL.fullmatch(value) or len(value) > limit:
            problems.append(f"{flag} {value!r}: lower-case letters, digits and '-', starting and ending with a "
                            f"letter or digit, at most {limit} characters")
    if not 1 <= opts.replicas <= MAX_REPLICAS:
        problems.append(f"--replicas {opts.replicas}: give 1 to {MAX_REPLICAS} control planes (two or three is HA)")
    problems += _store_problems(opts)
    if not _IMAGE.fullmatch(opts.image_ref):
        problems.append(f"--image {opts.image_ref!r}: an image reference, like registry.internal/llmgw:0.1.0")
    if not _IMAGE.fullmatch(opts.postgres_image):
        problems.append(f"--postgres-image {opts.postgres_image!r}: an image reference, like postgres:17")
    problems += _agent_problems(opts)
    if opts.client_service not in CLIENT_SERVICE_TYPES:
        problems.append(f"--client-service {opts.client_service!r}: one of {', '.join(CLIENT_SERVICE_TYPES)}")
    if opts.ca_dir:
        problems += _ca_problems(Path(opts.ca_dir))
    return problems


def _store_problems(opts: KubeOptions) -> list[str]:
    problems: list[str] = []
    if opts.store not in STORES:
        return [f"--store {opts.store!r}: statefulset (a PostgreSQL pod made here) or external (your PostgreSQL, "
                "its address in --dsn-file)"]
    if opts.store == "external":
        if not opts.dsn_file:
            problems.append("--dsn-file: --store external needs the file holding your PostgreSQL's address "
                            "(postgres://USER:PASSWORD@HOST:5432/DB), kept out of the command line")
        else:
            try:
                read_dsn(opts.dsn_file)
            except OSError as exc:
                problems.append(f"--dsn-file {opts.dsn_file}: cannot be read ({exc.strerror or exc})")
            except ValueError as exc:
                problems.append(f"--dsn-file {opts.dsn_file}: {exc}")
    elif opts.dsn_file:
        problems.append("--dsn-file: only with --store external; --store statefulset makes its own address")
    if opts.store == "statefulset":
        if not _QUANTITY.fullmatch(opts.storage):
            problems.append(f"--storage {opts.storage!r}: a Kubernetes quantity, like 20Gi")
        if opts.storage_class and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", opts.storage_class):
            problems.append(f"--storage-class {opts.storage_class!r}: the name of a StorageClass of the cluster")
    return problems


def _agent_problems(opts: KubeOptions) -> list[str]:
    problems: list[str] = []
    if opts.agent_service not in AGENT_SERVICE_TYPES:
        return [f"--agent-service {opts.agent_service!r}: LoadBalancer or NodePort (agents are outside the cluster, "
                "so the agent port needs an address they reach)"]
    if not opts.agent_hosts:
        problems.append("--agent-host: give the address agents outside the cluster dial "
                        + ("for each control plane (its load balancer's address or DNS name), one --agent-host each"
                           if opts.agent_service == "LoadBalancer" else
                           "(a Kubernetes node's address or a DNS name for the nodes), one --agent-host each"))
    problems += [p for p in (_host_problem(h) for h in opts.agent_hosts) if p]
    if len(set(opts.agent_hosts)) != len(opts.agent_hosts):
        problems.append("--agent-host: the same address twice; give each once")
    if (opts.agent_service == "LoadBalancer" and opts.agent_hosts and 1 <= opts.replicas <= MAX_REPLICAS
            and len(opts.agent_hosts) != opts.replicas):
        problems.append(f"--agent-host: {len(opts.agent_hosts)} given for {opts.replicas} control planes; with "
                        "--agent-service LoadBalancer each control plane has its own load balancer, so give one "
                        "address per replica, in order (or use --agent-service NodePort)")
    if not 1 <= opts.agent_port <= 65535:
        problems.append(f"--agent-port {opts.agent_port}: a port, 1 to 65535")
    if opts.agent_service == "NodePort":
        last = opts.agent_node_port + max(opts.replicas, 1) - 1
        if opts.agent_node_port not in NODE_PORTS or last not in NODE_PORTS:
            problems.append(f"--agent-node-port {opts.agent_node_port}: control plane i gets this plus i, so "
                            f"{opts.agent_node_port} to {last} must lie in Kubernetes' node ports, 30000 to 32767")
    return problems


def _ca_problems(ca_dir: Path) -> list[str]:
    from llmgw.pki import PkiError, load_certificate

    missing = [name for name in ("ca.pem", "ca-key.pem") if not (ca_dir / name).is_file()]
    if missing:
        return [f"--ca {ca_dir}: {' and '.join(missing)} missing; give the folder `llmgw ctl cert init-ca` (or "
                "server init's /etc/llmgw/ca) made, or leave --ca out for a new authority"]
    if not os.access(ca_dir / "ca-key.pem", os.R_OK):
        return [f"--ca {ca_dir}: ca-key.pem cannot be read here; run as the user who owns it"]
    try:
        load_certificate(ca_dir / "ca.pem")
    except PkiError as exc:
        return [f"--ca {ca_dir}: {exc}"]
    return []
