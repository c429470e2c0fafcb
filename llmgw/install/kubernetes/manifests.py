"""The Kubernetes resources of a control plane and its store, as plain mappings.

What runs where:

- a StatefulSet of control planes (`llmgw server`, one pod each); they share
  the PostgreSQL store, and one of them leads through the lease kept there,
  as on hosts (docs/control-plane.md);
- an init container copies the mounted secrets into /run/llmgw (memory),
  mode 0600 and owned by the server's user, because a Secret volume is
  read-only and group-readable and the server keeps its token 0600;
- the state folder (/var/lib/llmgw: control-plane.id, the journals of usage
  and audit rows the store has not taken yet) is an emptyDir: it outlives a
  container's restart, not the pod;
- a Service for clients (the gateway, `listen`), sending requests only to
  pods whose /ready says they serve a model;
- one Service per control plane for the agents (the mutual-TLS port): agents
  run outside the cluster and list every control plane, and a standby sends
  an agent on to the leader, so each pod needs an address of its own. These
  Services reach a pod before it is ready: a cluster with no node yet serves
  no model, and agents must be able to join it;
- a PodDisruptionBudget that keeps all but one control plane up through a
  node drain;
- with --store statefulset, one PostgreSQL pod on a claim of its own.
"""

from __future__ import annotations

import base64
from typing import Any

from llmgw.install.kubernetes.material import POSTGRES_DB, POSTGRES_USER, Material
from llmgw.install.kubernetes.options import KubeOptions

__all__ = ["resources", "server_yaml", "PATHS", "PORTS", "SERVER_UID"]

#: Where the pod has each thing (docs/kubernetes.md names the same).
PATHS = {
    "zipapp": "/opt/llmgw/llmgw.pyz",
    "config": "/etc/llmgw/server.yaml",
    "tls": "/etc/llmgw/tls",
    "secrets": "/etc/llmgw/secrets",
    "run": "/run/llmgw",
    "state": "/var/lib/llmgw",
    "tmp": "/tmp",
}
PORTS = {"api": 8080, "agents": 7443, "metrics": 9091, "admin": 9090}
SERVER_UID = 10001  # the llmgw user of the Dockerfile
POSTGRES_UID = 999  # the postgres user of the official image
#: The files of the secrets Secret, as the init container copies them into the state folder.
SECRET_FILES = ("admin-token", "key-hash-secret", "store-dsn")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def labels(opts: KubeOptions, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "llmgw", "app.kubernetes.io/instance": opts.name,
            "app.kubernetes.io/component": component}


def _meta(opts: KubeOptions, name: str, component: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": opts.namespace, "labels": labels(opts, component), **extra}


def server_yaml(opts: KubeOptions) -> str:
    """The ConfigMap's server.yaml: listeners, and where the pod has its certificate, token and store address."""
    run, tls = PATHS["run"], PATHS["tls"]
    return "\n".join([
        f"# server.yaml of the llmgw control planes in namespace {opts.namespace}, made by `llmgw server kube`.",
        "# Every key: `llmgw docs reference`. Secrets are not here: the pod has them in files.",
        "",
        "# The gateway (OpenAI- and Anthropic-compatible), behind the Service "
        f"{opts.name}.",
        f'listen: ":{PORTS["api"]}"',
        "# The admin API stays on the pod's loopback: kubectl exec, or kubectl port-forward.",
        f'admin_listen: "127.0.0.1:{PORTS["admin"]}"',
        f'admin_token_file: "{run}/admin-token"',  # the key-hash secret beside it
        f'metrics_listen: ":{PORTS["metrics"]}"',
        "",
        "# Agents outside the cluster connect here, through the Services "
        f"{opts.agent_service_name(0)}...",
        f'agent_listen: ":{PORTS["agents"]}"',
        "# What agents and the other control planes are told to dial is each pod's own agent Service, as",
        "# agents outside reach it: LLMGW_AGENT_ADVERTISE, set by the StatefulSet's command from the pod's name,",
        "# stands in for agent_advertise (one value here would be every pod's).",
        "agent_tls:",
        f'  cert: "{tls}/server.pem"',
        f'  key: "{tls}/server-key.pem"',
        f'  ca: "{tls}/ca.pem"',
        "",
        "store:",
        "  # PostgreSQL, shared by every control plane; the leader's lease is kept there.",
        f'  dsn: "file:{run}/store-dsn"',
        "",
        "auth:",
        "  keys_required: true",
        "  signup_open: false",
        "",
        "# Models: here, or at run time with `llmgw ctl model add` (kept in the store).",
        "models: []",
        "",
    ])


def resources(opts: KubeOptions, material: Material) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file name, the resources in it), in the order `kubectl apply -f DIR` should meet them."""
    files: list[tuple[str, list[dict[str, Any]]]] = [
        ("00-namespace.yaml", [{"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": opts.namespace, "labels": labels(opts, "namespace")}}]),
        ("10-serviceaccount.yaml", [{
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(opts, opts.name, "control-plane"),
            # llmgw never talks to the Kubernetes API.
            "automountServiceAccountToken": False,
        }]),
        ("20-secrets.yaml", _secrets(opts, material)),
        ("30-configmap.yaml", [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": _meta(opts, f"{opts.name}-config", "control-plane"),
                                "data": {"server.yaml": server_yaml(opts)}}]),
    ]
    if opts.store == "statefulset":
        files.append(("40-postgres.yaml", _postgres(opts)))
    files += [
        ("50-control-plane.yaml", [_control_planes(opts)]),
        ("60-services.yaml", _services(opts)),
        ("70-disruption-budget.yaml", [{
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(opts, opts.name, "control-plane"),
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": labels(opts, "control-plane")},
                # A pod that is not ready (no model served yet) may always be evicted, so a drain never waits on it.
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            },
        }]),
    ]
    return files


def _secrets(opts: KubeOptions, m: Material) -> list[dict[str, Any]]:
    out = [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": _meta(opts, f"{opts.name}-secrets",
                                                                                  "control-plane"),
         "data": {"admin-token": _b64(m.admin_token + "\n"), "key-hash-secret": _b64(m.key_hash_secret + "\n"),
                  "store-dsn": _b64(m.dsn + "\n")}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": _meta(opts, f"{opts.name}-tls",
                                                                                  "control-plane"),
         "data": {"ca.pem": _b64(m.ca_pem), "server.pem": _b64(m.server_pem), "server-key.pem": _b64(m.server_key_pem)}},
    ]
    if opts.store == "statefulset":
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": _meta(opts, f"{opts.name}-postgres", "store"),
                    "data": {"password": _b64(m.postgres_password)}})
    return out


def _restricted(uid: int) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "runAsUser": uid, "runAsGroup": uid, "capabilities": {"drop": ["ALL"]}}


def init_command() -> list[str]:
    """The init container's: the Secret's files into /run/llmgw, 0600 and the server's own."""
    return ["sh", "-c", f"install -m 0600 {PATHS['secrets']}/* {PATHS['run']}/"]


def server_command(opts: KubeOptions) -> list[str]:
    """`llmgw server`, with LLMGW_AGENT_ADVERTISE set to this pod's own agent Service's outside address: the pods
    of one StatefulSet share one server.yaml, and each tells agents and the other control planes its own."""
    from llmgw.config.advertise import ADVERTISE_ENV

    cases = "".join(f"{opts.pod_name(i)}) export {ADVERTISE_ENV}='{address}' ;; "
                    for i, address in enumerate(opts.advertised()))
    unknown = ('*) echo "llmgw: pod $POD_NAME has no agent address in this command; agents are told its name '
               'inside the cluster" >&2 ;; ')
    server = " ".join(["exec", "python3", PATHS["zipapp"], "server", "--config", PATHS["config"]])
    return ["sh", "-c", f'case "$POD_NAME" in {cases}{unknown}esac; {server}']


def _control_planes(opts: KubeOptions) -> dict[str, Any]:
    selector = labels(opts, "control-plane")
    mounts = [
        {"name": "config", "mountPath": PATHS["config"], "subPath": "server.yaml", "readOnly": True},
        {"name": "tls", "mountPath": PATHS["tls"], "readOnly": True},
        {"name": "run", "mountPath": PATHS["run"], "readOnly": True},
        {"name": "state", "mountPath": PATHS["state"]},
        {"name": "tmp", "mountPath": PATHS["tmp"]},
    ]

    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": "api"}, "periodSeconds": period, "failureThreshold": failures,
                "timeoutSeconds": 3}

    pod = {
        "serviceAccountName": opts.name,
        "automountServiceAccountToken": False,
        # No LLMGW_*_SERVICE_HOST variables from the Services: llmgw reads settings from LLMGW_* variables.
        "enableServiceLinks": False,
        # Agents dial again within a second of a control plane going; a long grace only delays its successor.
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "runAsUser": SERVER_UID, "runAsGroup": SERVER_UID,
                            "fsGroup": SERVER_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"labelSelector": {"matchLabels": selector},
                                "topologyKey": "kubernetes.io/hostname"}}]}},
        "initContainers": [{
            "name": "secrets",
            "image": opts.image_ref,
            "imagePullPolicy": "IfNotPresent",
            "command": init_command(),
            "securityContext": _restricted(SERVER_UID),
            "volumeMounts": [{"name": "secrets", "mountPath": PATHS["secrets"], "readOnly": True},
                             {"name": "run", "mountPath": PATHS["run"]}],
        }],
        "containers": [{
            "name": "server",
            "image": opts.image_ref,
            "imagePullPolicy": "IfNotPresent",
            "command": server_command(opts),
            # The zipapp unpacks its packages here at start (the root filesystem is read-only); the command picks
            # this pod's agent address by its name.
            "env": [{"name": "SHIV_ROOT", "value": f"{PATHS['tmp']}/llmgw"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"name": "api", "containerPort": PORTS["api"]},
                      {"name": "agents", "containerPort": PORTS["agents"]},
                      {"name": "metrics", "containerPort": PORTS["metrics"]}],
            # Alive while /health answers; given the traffic of clients only while /ready says a model is served.
            "startupProbe": probe("/health", 5, 60),
            "livenessProbe": probe("/health", 10, 6),
            "readinessProbe": probe("/ready", 5, 2),
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            "securityContext": _restricted(SERVER_UID),
            "volumeMounts": mounts,
        }],
        "volumes": [
            {"name": "config", "configMap": {"name": f"{opts.name}-config"}},
            {"name": "tls", "secret": {"secretName": f"{opts.name}-tls", "defaultMode": 0o440}},
            {"name": "secrets", "secret": {"secretName": f"{opts.name}-secrets", "defaultMode": 0o440}},
            # The token, the key-hash secret and the store's address, 0600, in memory.
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            # control-plane.id, by which a restarted container takes its own lease back at once, and the journals.
            {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _meta(opts, opts.name, "control-plane"),
        "spec": {
            "replicas": opts.replicas,
            "serviceName": f"{opts.name}-pods",
            # Every control plane starts at once; one leads through the store's lease.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pod},
        },
    }


def _service(opts: KubeOptions, name: str, spec: dict[str, Any], component: str = "control-plane") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(opts, name, component), "spec": spec}


def _services(opts: KubeOptions) -> list[dict[str, Any]]:
    selector = labels(opts, "control-plane")
    client_spec: dict[str, Any] = {
        "type": opts.client_service, "selector": selector,
        "ports": [{"name": "api", "port": PORTS["api"], "targetPort": "api"},
                  {"name": "metrics", "port": PORTS["metrics"], "targetPort": "metrics"}],
    }
    out = [
        _service(opts, opts.name, client_spec),
        # The StatefulSet's own: a stable name for each pod.
        _service(opts, f"{opts.name}-pods", {"clusterIP": "None", "publishNotReadyAddresses": True,
                                            "selector": selector,
                                            "ports": [{"name": "api", "port": PORTS["api"], "targetPort": "api"}]}),
    ]
    for i in range(opts.replicas):
        port: dict[str, Any] = {"name": "agents", "port": opts.agent_port, "targetPort": "agents", "protocol": "TCP"}
        if opts.agent_service == "NodePort":
            port["nodePort"] = opts.agent_node_port + i
        out.append(_service(opts, opts.agent_service_name(i), {
            "type": opts.agent_service,
            # Agents join a control plane before it serves a model, so before it is ready.
            "publishNotReadyAddresses": True,
            "selector": {**selector, "statefulset.kubernetes.io/pod-name": opts.pod_name(i)},
            "ports": [port],
        }))
    return out


def _postgres(opts: KubeOptions) -> list[dict[str, Any]]:
    name = f"{opts.name}-postgres"
    selector = labels(opts, "store")
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": opts.storage}}}
    if opts.storage_class:
        claim["storageClassName"] = opts.storage_class
    ready = ["pg_isready", "-U", POSTGRES_USER, "-d", POSTGRES_DB, "-h", "127.0.0.1"]
    return [
        _service(opts, name, {"selector": selector, "ports": [{"name": "postgres", "port": 5432,
                                                                "targetPort": "postgres"}]}, "store"),
        {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(opts, name, "store"),
            "spec": {
                "replicas": 1,
                "serviceName": name,
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": selector}, "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": POSTGRES_UID, "runAsGroup": POSTGRES_UID,
                                        "fsGroup": POSTGRES_UID, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "postgres",
                        "image": opts.postgres_image,
                        "imagePullPolicy": "IfNotPresent",
                        "env": [
                            {"name": "POSTGRES_USER", "value": POSTGRES_USER},
                            {"name": "POSTGRES_DB", "value": POSTGRES_DB},
                            {"name": "POSTGRES_PASSWORD",
                             "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}}},
                            {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                        ],
                        "ports": [{"name": "postgres", "containerPort": 5432}],
                        "readinessProbe": {"exec": {"command": ready}, "periodSeconds": 5},
                        "livenessProbe": {"exec": {"command": ready}, "periodSeconds": 10, "failureThreshold": 6},
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"},
                                         {"name": "run", "mountPath": "/var/run/postgresql"}],
                    }],
                    "volumes": [{"name": "run", "emptyDir": {}}],
                }},
                "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": selector}, "spec": claim}],
            },
        },
    ]
