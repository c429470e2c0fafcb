"""`llmgw server kube`: every manifest passes Kubernetes' schemas, server.yaml passes our loader, secrets stay in
Secrets, the certificate names what the agent Services are reached by, and bad options write nothing."""

from __future__ import annotations

import ipaddress
import stat
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from cryptography import x509

from llmgw.config import load_server_config
from tests.kubernetes.kube_files import (
    KUBERNETES_VERSIONS, PodFiles, configmap_server_yaml, control_plane, documents, find, kube, secret_data,
)

HOSTS = ("10.0.0.200", "cp2.example.com")


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kube") / "manifests"
    assert kube(out, *[f"--agent-host={h}" for h in HOSTS]) == 0
    return out


@pytest.fixture(scope="module")
def external(tmp_path_factory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("kube-ext")
    dsn = "postgres://llmgw:s3cret-Pass@pg.internal:5432/llmgw?sslmode=verify-full"
    (base / "dsn").write_text(dsn + "\n")
    out = base / "manifests"
    assert kube(out, "--store", "external", "--dsn-file", str(base / "dsn"), "--replicas", "3",
                "--agent-service", "NodePort", "--agent-host", "192.0.2.10", "--agent-host", "k8s.example.com",
                "--namespace", "ai", "--name", "gw") == 0
    return out, dsn


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("made", ["out", "external"])
def test_every_manifest_passes_the_kubernetes_schemas(made, version, request):
    folder = request.getfixturevalue(made)
    folder = folder[0] if isinstance(folder, tuple) else folder
    docs = [doc for docs in documents(folder).values() for doc in docs]
    for doc in docs:
        # strict: a field Kubernetes does not know (a typo) fails too, instead of being dropped by the API server.
        kubernetes_validate.validate(doc, version, strict=True)
    kinds = {d["kind"] for d in docs}
    assert kinds == {"Namespace", "ServiceAccount", "Secret", "ConfigMap", "StatefulSet", "Service",
                     "PodDisruptionBudget"}
    assert len(docs) >= 12


def test_what_is_written_and_how_it_is_kept(out):
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert names == ["00-namespace.yaml", "10-serviceaccount.yaml", "20-secrets.yaml", "30-configmap.yaml",
                     "40-postgres.yaml", "50-control-plane.yaml", "60-services.yaml", "70-disruption-budget.yaml",
                     "image/Dockerfile", "nodes/agent-control-planes.yaml", "pki/ca-key.pem", "pki/ca.pem"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "20-secrets.yaml").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "pki" / "ca-key.pem").stat().st_mode) == 0o600
    # The resources apply in order: the namespace, then what the pods mount, then the pods.
    assert [d["kind"] for d in documents(out)["00-namespace.yaml"]] == ["Namespace"]
    sts = control_plane(out)
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["podManagementPolicy"] == "Parallel"
    secrets = secret_data(out, "llmgw-secrets")
    assert len(secrets["admin-token"].strip()) == 43  # as server init makes it
    assert len(bytes.fromhex(secrets["key-hash-secret"].strip())) == 32
    assert sts["spec"]["template"]["spec"]["enableServiceLinks"] is False  # no LLMGW_* variables from Services
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["run"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}  # the secrets' 0600 copies
    assert volumes["state"]["emptyDir"] == {"sizeLimit": "1Gi"}  # /var/lib/llmgw: on the node's disk
    (account,) = find(out, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    (pdb,) = find(out, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]


def test_server_yaml_is_read_by_our_loader_with_the_files_where_the_pod_has_them(out, tmp_path):
    pod = PodFiles(out, tmp_path)
    server = pod.pod["containers"][0]
    assert server["command"][:2] == ["sh", "-c"]
    assert server["command"][2].endswith("; exec python3 /opt/llmgw/llmgw.pyz server --config /etc/llmgw/server.yaml")
    init = pod.pod["initContainers"][0]
    done = subprocess.run([pod.localize(word) for word in init["command"]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("admin-token", "key-hash-secret", "store-dsn"):
        assert stat.S_IMODE(Path(pod.local(f"/run/llmgw/{name}")).stat().st_mode) == 0o600
    config = load_server_config(pod.finish("/etc/llmgw/server.yaml"))
    assert config.store.backend == "postgres"
    assert config.store.dsn.reveal() == secret_data(out, "llmgw-secrets")["store-dsn"].strip()
    assert config.store.dsn.reveal().startswith("postgres://llmgw:")
    assert "@llmgw-postgres.llmgw.svc.cluster.local:5432/llmgw" in config.store.dsn.reveal()
    assert config.admin_listen == "127.0.0.1:9090"  # the admin API stays on the pod's loopback
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert config.listen == f":{ports['api']}" and config.agent_listen == f":{ports['agents']}"
    assert config.metrics_listen == f":{ports['metrics']}"
    # Every file server.yaml names is in a volume the pod mounts.
    for path in (config.agent_tls.cert, config.agent_tls.key, config.agent_tls.ca, config.admin_token_file):
        assert Path(path).is_file(), path
    probes = {k: server[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["readinessProbe"] == {"path": "/ready", "port": "api"}
    assert probes["livenessProbe"]["path"] == "/health" and probes["startupProbe"]["path"] == "/health"


def test_secrets_are_in_secrets_only(out, external):
    for folder, dsn, prefix in ((out, None, "llmgw"), (*external, "gw")):
        values = [v.strip() for name in ("secrets", "tls") for k, v in secret_data(folder, f"{prefix}-{name}").items()
                  if k not in ("ca.pem", "server.pem")]
        values.append((folder / "pki" / "ca-key.pem").read_text().strip())
        if dsn:
            assert dsn in values
        else:
            values.append(secret_data(folder, f"{prefix}-postgres")["password"])
        assert len(values) >= 5 and all(len(v) >= 20 for v in values)
        # A key's every line, so that no piece of one is anywhere else either.
        pieces = [line for v in values for line in v.splitlines() if len(line) >= 20 and "PRIVATE KEY" not in line]
        for path in folder.rglob("*"):
            if path.is_file() and path.name not in ("20-secrets.yaml", "ca-key.pem"):
                text = path.read_text()
                assert not [p for p in pieces if p in text], path
        # The pods get the secrets as files, never in their environment or on a command line (the pod's name only).
        spec = control_plane(folder)["spec"]["template"]["spec"]
        for container in [*spec["initContainers"], *spec["containers"]]:
            assert all(e.get("valueFrom", {}).keys() <= {"fieldRef"} for e in container.get("env", []))


def test_the_certificate_names_every_address_agents_reach_a_control_plane_by(out):
    tls = secret_data(out, "llmgw-tls")
    cert = x509.load_pem_x509_certificate(tls["server.pem"].encode())
    ca = x509.load_pem_x509_certificate((out / "pki" / "ca.pem").read_text().encode())
    assert tls["ca.pem"] == (out / "pki" / "ca.pem").read_text()
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName)) | {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    pods = {f"llmgw-{i}" for i in range(control_plane(out)["spec"]["replicas"])}
    agents = [s for s in find(out, "Service") if s["metadata"]["name"].startswith("llmgw-agents-")]
    assert len(agents) == len(pods) == 2
    for i, svc in enumerate(sorted(agents, key=lambda s: s["metadata"]["name"])):
        spec = svc["spec"]
        assert spec["type"] == "LoadBalancer" and spec["publishNotReadyAddresses"] is True
        assert spec["selector"]["statefulset.kubernetes.io/pod-name"] == f"llmgw-{i}"
        assert spec["ports"] == [{"name": "agents", "port": 7443, "targetPort": "agents", "protocol": "TCP"}]
        name = svc["metadata"]["name"]
        assert {f"{name}.llmgw.svc", f"{name}.llmgw.svc.cluster.local"} <= names
    assert set(HOSTS) <= names and "127.0.0.1" in names
    planes = (out / "nodes" / "agent-control-planes.yaml").read_text()
    assert "  - https://10.0.0.200:7443\n  - https://cp2.example.com:7443\n" in planes


def advertised_by_the_command(out: Path, pod: str) -> subprocess.CompletedProcess[str]:
    """The server container's shell command, run by a real sh as the pod `pod`, printing LLMGW_AGENT_ADVERTISE
    where it would start llmgw server."""
    (server,) = control_plane(out)["spec"]["template"]["spec"]["containers"]
    shell, flag, script = server["command"]
    start = "exec python3 /opt/llmgw/llmgw.pyz server --config /etc/llmgw/server.yaml"
    assert script.endswith(start)
    script = script.replace(start, 'printf %s "${LLMGW_AGENT_ADVERTISE-unset}"')
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod}
    return subprocess.run([shell, flag, script], capture_output=True, text=True, env=env, timeout=10)


@pytest.mark.parametrize("which, want", [
    ("out", {"llmgw-0": "10.0.0.200:7443", "llmgw-1": "cp2.example.com:7443"}),  # a load balancer each
    ("external", {"gw-0": "192.0.2.10:30743", "gw-1": "192.0.2.10:30744", "gw-2": "192.0.2.10:30745"}),  # node ports
])
def test_each_pod_advertises_its_own_agent_service_as_agents_outside_dial_it(request, which, want):
    from llmgw.config.advertise import advertise_problem

    folder = request.getfixturevalue(which)
    out = folder if which == "out" else folder[0]
    planes = (out / "nodes" / "agent-control-planes.yaml").read_text()
    sans = x509.load_pem_x509_certificate(
        secret_data(out, f"{next(iter(want))[:-2]}-tls")["server.pem"].encode()
    ).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName)) | {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    for pod, address in want.items():
        done = advertised_by_the_command(out, pod)
        assert done.returncode == 0 and done.stdout == address and done.stderr == "", done
        assert advertise_problem(address) is None
        assert f"https://{address}\n" in planes  # one of the addresses agents list for that control plane
        assert address.rpartition(":")[0] in names  # and the server certificate names it
    # A pod the command has no address for (scaled past the Services made): it says so, and llmgw still starts.
    extra = advertised_by_the_command(out, f"{next(iter(want))[:-2]}-9")
    assert extra.returncode == 0 and extra.stdout == "unset"
    assert "has no agent address" in extra.stderr


def test_node_ports_and_an_external_store(external):
    out, dsn = external
    assert not (out / "40-postgres.yaml").exists()
    assert secret_data(out, "gw-secrets")["store-dsn"] == dsn + "\n"
    agents = sorted((s for s in find(out, "Service") if "-agents-" in s["metadata"]["name"]),
                    key=lambda s: s["metadata"]["name"])
    assert [s["spec"]["ports"][0]["nodePort"] for s in agents] == [30743, 30744, 30745]
    assert all(s["metadata"]["namespace"] == "ai" for s in agents)
    planes = (out / "nodes" / "agent-control-planes.yaml").read_text()
    for port in (30743, 30744, 30745):
        assert f"https://192.0.2.10:{port}" in planes and f"https://k8s.example.com:{port}" in planes
    cert = x509.load_pem_x509_certificate(secret_data(out, "gw-tls")["server.pem"].encode())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("192.0.2.10") in sans.get_values_for_type(x509.IPAddress)
    assert "gw-agents-2.ai.svc.cluster.local" in sans.get_values_for_type(x509.DNSName)


def test_an_existing_ca_issues_the_certificate_and_stays_where_it_is(tmp_path):
    from llmgw.pki import init_ca

    init_ca(tmp_path / "ca")
    out = tmp_path / "m"
    assert kube(out, "--ca", str(tmp_path / "ca"), "--replicas", "1", "--agent-host", "cp.example.com") == 0
    assert not (out / "pki").exists()
    cert = x509.load_pem_x509_certificate(secret_data(out, "llmgw-tls")["server.pem"].encode())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.pem").read_bytes()))


@pytest.mark.parametrize(("args", "said"), [
    (["--replicas", "0", "--agent-host", "a.example.com"], "--replicas 0: give 1 to 9"),
    ([], "--agent-host: give the address agents outside the cluster dial for each control plane"),
    (["--agent-host", "a.example.com"], "--agent-host: 1 given for 2 control planes"),
    (["--agent-host", "not a host", "--replicas", "1"], "--agent-host 'not a host': neither an IP address"),
    (["--store", "external", "--agent-host", "a", "--agent-host", "b"], "--dsn-file: --store external needs"),
    (["--dsn-file", "/etc/hostname", "--agent-host", "a", "--agent-host", "b"], "--dsn-file: only with --store external"),
    (["--namespace", "Bad_NS", "--agent-host", "a", "--agent-host", "b"], "--namespace 'Bad_NS': lower-case letters"),
    (["--agent-service", "NodePort", "--agent-node-port", "32767", "--agent-host", "a"],
     "--agent-node-port 32767: control plane i gets this plus i, so 32767 to 32768"),
    (["--ca", "/nonexistent", "--agent-host", "a", "--agent-host", "b"], "--ca /nonexistent: ca.pem and ca-key.pem missing"),
    (["--storage", "lots", "--agent-host", "a", "--agent-host", "b"], "--storage 'lots': a Kubernetes quantity"),
])
def test_bad_options_are_refused_by_name_and_nothing_is_written(tmp_path, capsys, args, said):
    out = tmp_path / "m"
    assert kube(out, *args) == 2
    err = capsys.readouterr().err
    assert "llmgw server kube: nothing was written:" in err and said in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_dsn_file_that_is_no_postgres_address_is_refused_and_never_repeated(tmp_path, capsys):
    (tmp_path / "dsn").write_text("mysql://root:hunter2hunter2@db/x\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep").write_text("mine")
    assert kube(tmp_path / "m", "--store", "external", "--dsn-file", str(tmp_path / "dsn"), "--agent-host", "a",
                "--agent-host", "b") == 2
    err = capsys.readouterr().err
    assert f"--dsn-file {tmp_path / 'dsn'}: does not hold a PostgreSQL address" in err
    assert f"--out {tmp_path / 'm'}: exists and is not an empty folder" in err
    assert "hunter2" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dsn", "m"] and (tmp_path / "m" / "keep").read_text() == "mine"


def test_help_names_what_it_writes_and_every_option():
    done = subprocess.run([sys.executable, "-m", "llmgw", "server", "kube", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in ("--out DIR", "--replicas N", "--store {statefulset,external}", "--dsn-file FILE", "--image REF",
                  "--agent-host HOST", "--agent-service {LoadBalancer,NodePort}", "--agent-node-port PORT",
                  "--client-service {ClusterIP,LoadBalancer,NodePort}", "--ca DIR", "--helm", "PodDisruptionBudget",
                  "nothing is written"):
        assert words in text, words
    server_help = subprocess.run([sys.executable, "-m", "llmgw", "server", "--help"], capture_output=True, text=True)
    assert "kube" in server_help.stdout


def test_an_empty_out_folder_is_used(tmp_path):
    (tmp_path / "m").mkdir()
    assert kube(tmp_path / "m", "--replicas", "1", "--agent-host", "cp.example.com") == 0
    assert (tmp_path / "m" / "50-control-plane.yaml").is_file()


def test_the_dockerfile_puts_llmgw_on_the_path(out, tmp_path):
    """The image's own steps, short of docker: its RUN line makes the `llmgw` that `kubectl exec` runs."""
    text = (out / "image" / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines[0] == "FROM python:3.12-slim" and "COPY llmgw.pyz /opt/llmgw/llmgw.pyz" in lines
    assert "ENV SHIV_ROOT=/tmp/llmgw" in lines and "USER 10001:10001" in lines
    (run,) = [line[4:] for line in lines if line.startswith("RUN chmod")]
    zipapp = tmp_path / "opt" / "llmgw" / "llmgw.pyz"
    zipapp.parent.mkdir(parents=True)
    zipapp.write_text("import sys\nprint('ran with', sys.argv[1:])\n")
    (tmp_path / "bin").mkdir()
    run = run.replace("/opt/llmgw/llmgw.pyz", str(zipapp)).replace("/usr/local/bin/llmgw", str(tmp_path / "bin" / "llmgw"))
    done = subprocess.run(["sh", "-c", run], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ran = subprocess.run([str(tmp_path / "bin" / "llmgw"), "ctl", "status", "--json"], capture_output=True, text=True)
    assert ran.stdout == "ran with ['ctl', 'status', '--json']\n", ran.stderr
