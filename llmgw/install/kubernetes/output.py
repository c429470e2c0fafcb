"""The files `llmgw server kube` writes: every one made in a folder beside --out, which then becomes --out.

    DIR/00-namespace.yaml ... 70-disruption-budget.yaml   kubectl apply -f DIR
    DIR/20-secrets.yaml                                   the Secrets, mode 0600
    DIR/pki/ca.pem, ca-key.pem (0600)                     the cluster CA, unless --ca named one: keep it here
    DIR/helm/llmgw/, DIR/helm/values.yaml                 with --helm: the chart, and its values for these options,
                                                          instead of 10-serviceaccount.yaml ... 70-disruption-budget.yaml
    DIR/nodes/agent-control-planes.yaml                   the control_planes of every node's agent.yaml
    DIR/image/Dockerfile                                  the image: the zipapp on a Python image

The two folders keep what is not a resource out of `kubectl apply -f DIR`, and
the secrets out of the image's build context.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path
from typing import Any

from llmgw.install.kubernetes.manifests import PATHS, PORTS, SERVER_UID, resources
from llmgw.install.kubernetes.material import make_material
from llmgw.install.kubernetes.options import KubeError, KubeOptions, check_options

__all__ = ["write_manifests", "dump_yaml", "dockerfile", "SECRET_FILE"]

SECRET_FILE = "20-secrets.yaml"
#: What `llmgw server kube --helm` still writes as manifests: the chart needs the namespace and the Secrets first.
CHART_LEAVES_OUT = ("00-namespace.yaml", SECRET_FILE)
CHART = Path(__file__).with_name("chart")
PYTHON_IMAGE = "python:3.12-slim"


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    """Several resources as one YAML stream; text of several lines as a block, so server.yaml stays readable."""
    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    def blocks(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: blocks(v) for k, v in value.items()}
        if isinstance(value, list):
            return [blocks(v) for v in value]
        if isinstance(value, str) and "\n" in value:
            return LiteralScalarString(value)
        return value

    yaml = YAML(typ="rt")
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump_all([blocks(d) for d in documents], out)
    return out.getvalue()


def dockerfile(opts: KubeOptions) -> str:
    return "\n".join([
        "# The llmgw control plane's image, for the manifests beside this file (docs/kubernetes.md).",
        "# Build it where the cluster pulls from, with llmgw.pyz (python3 build.py makes dist/llmgw.pyz) here:",
        "#",
        f"#   cp dist/llmgw.pyz {opts.out / 'image'}/ && docker build -t {opts.image_ref} {opts.out / 'image'}",
        f"#   docker push {opts.image_ref}",
        "#",
        "# Only the control plane runs from it: the nodes' agents run on their machines, as root.",
        f"FROM {PYTHON_IMAGE}",
        f"RUN useradd --system --uid {SERVER_UID} --user-group --home-dir {PATHS['state']} --no-create-home "
        "--shell /usr/sbin/nologin llmgw",
        f"COPY llmgw.pyz {PATHS['zipapp']}",
        f"RUN chmod 0755 {PATHS['zipapp']} && printf '#!/bin/sh\\nexec python3 {PATHS['zipapp']} \"$@\"\\n' "
        "> /usr/local/bin/llmgw && chmod 0755 /usr/local/bin/llmgw",
        "# The root filesystem is read-only in the pod: the zipapp unpacks under /tmp, an emptyDir there.",
        f"ENV SHIV_ROOT={PATHS['tmp']}/llmgw",
        f"USER {SERVER_UID}:{SERVER_UID}",
        f"EXPOSE {PORTS['api']} {PORTS['agents']} {PORTS['metrics']}",
        f'CMD ["python3", "{PATHS["zipapp"]}", "server", "--config", "{PATHS["config"]}"]',
        "",
    ])


def agent_fragment(opts: KubeOptions) -> str:
    lines = [
        "# For every node's agent.yaml: the control planes in Kubernetes, as agents outside it dial them.",
        "# The node's certificate: llmgw ctl cert issue-node NODE --dir pki --out NODE-tls (docs/kubernetes.md).",
        "control_planes:",
        *[f"  - {address}" for address in opts.agent_addresses()],
        "",
    ]
    return "\n".join(lines)


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, mode)


def write_manifests(opts: KubeOptions) -> list[Path]:
    """Check, then write everything into a fresh folder that becomes --out; KubeError when nothing was written."""
    problems = check_options(opts)
    if problems:
        raise KubeError(problems)
    parent = opts.out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(_mkdtemp(parent, f".{opts.out.name}.part-"))
    except OSError as exc:
        raise KubeError([f"--out {opts.out}: cannot write in {parent} ({exc.strerror or exc})"]) from None
    try:
        material = make_material(opts, staging / "pki")
        written: list[str] = []
        for name, documents in resources(opts, material):
            if opts.helm and name not in CHART_LEAVES_OUT:
                continue  # the chart makes it
            _write(staging / name, dump_yaml(documents), 0o600 if name == SECRET_FILE else 0o644)
            written.append(name)
        if opts.helm:
            written += _write_chart(opts, staging / "helm")
        for folder, name, text in (("nodes", "agent-control-planes.yaml", agent_fragment(opts)),
                                   ("image", "Dockerfile", dockerfile(opts))):
            (staging / folder).mkdir(mode=0o755)
            _write(staging / folder / name, text, 0o644)
            written.append(f"{folder}/{name}")
        if not opts.ca_dir:
            written += ["pki/ca.pem", "pki/ca-key.pem"]
        if opts.out.exists():  # an empty folder, checked above
            opts.out.rmdir()
        os.rename(staging, opts.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [opts.out / name for name in written]


def helm_values(opts: KubeOptions) -> dict[str, Any]:
    """The chart's values for these options: it then makes what `resources` would, less the namespace and Secrets."""
    return {
        "namespace": opts.namespace, "name": opts.name, "image": opts.image_ref, "replicas": opts.replicas,
        "store": {"type": opts.store, "postgresImage": opts.postgres_image, "storage": opts.storage,
                  "storageClass": opts.storage_class},
        "agentService": {"type": opts.agent_service, "port": opts.agent_port, "nodePort": opts.agent_node_port},
        "agentAdvertise": opts.advertised(),
        "clientService": {"type": opts.client_service},
    }


def _write_chart(opts: KubeOptions, folder: Path) -> list[str]:
    from llmgw.buildinfo import build_info

    chart = folder / "llmgw"  # helm wants the folder named as the chart
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("__pycache__"))
    meta = chart / "Chart.yaml"
    meta.write_text(re.sub(r'(?m)^appVersion: .*$', f'appVersion: "{build_info()["version"]}"', meta.read_text()))
    header = ("# The llmgw chart's values for the cluster `llmgw server kube` made the Secrets for (20-secrets.yaml):\n"
              f"#   kubectl apply -f {opts.out / '00-namespace.yaml'} -f {opts.out / SECRET_FILE}\n"
              f"#   helm install {opts.name} {opts.out / 'helm' / 'llmgw'} -n {opts.namespace} -f {opts.out / 'helm' / 'values.yaml'}\n")
    _write(folder / "values.yaml", header + dump_yaml([helm_values(opts)]), 0o644)
    return ["helm/values.yaml", *sorted(str(p.relative_to(folder.parent)) for p in chart.rglob("*") if p.is_file())]


def _mkdtemp(parent: Path, prefix: str) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix=prefix, dir=parent)
