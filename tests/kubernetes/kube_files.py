"""Run `llmgw server kube` as an operator would, and read back what it wrote."""

from __future__ import annotations

import base64
import functools
import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from llmgw.cli.main import main

#: The Kubernetes versions every manifest is checked against: the oldest the
#: manifests need (unhealthyPodEvictionPolicy is GA in 1.31) and the newest
#: kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.31.0", "1.37.0")


def kube(out: Path, *args: str) -> int:
    return main(["server", "kube", "--out", str(out), *args])


def documents(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Each manifest file's resources, by file name (read once: what the command wrote does not change)."""
    return _documents(str(out))


@functools.lru_cache(maxsize=16)
def _documents(out: str) -> dict[str, list[dict[str, Any]]]:
    yaml = YAML(typ="safe")
    return {p.name: [d for d in yaml.load_all(p.read_text()) if d] for p in sorted(Path(out).glob("*.yaml"))}


def find(out: Path, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for docs in documents(out).values() for d in docs
            if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def secret_data(out: Path, name: str) -> dict[str, str]:
    (secret,) = find(out, "Secret", name)
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def configmap_server_yaml(out: Path) -> str:
    (cm,) = find(out, "ConfigMap")
    return cm["data"]["server.yaml"]


def control_plane(out: Path) -> dict[str, Any]:
    (sts,) = [s for s in find(out, "StatefulSet") if s["metadata"]["labels"]["app.kubernetes.io/component"]
              == "control-plane"]
    return sts


class PodFiles:
    """The control plane pod's volumes laid out under `root` as the kubelet mounts them (Secrets 0440),
    so the pod's own command lines run here against them with each mount path moved under `root`."""

    def __init__(self, out: Path, root: Path) -> None:
        self.root = root
        pod = control_plane(out)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.mounts: dict[str, Path] = {}
        for container in [*pod["initContainers"], *pod["containers"]]:
            for mount in container["volumeMounts"]:
                self.mounts[mount["mountPath"]] = self._lay(out, volumes[mount["name"]], mount)
        self.pod = pod

    def local(self, path: str) -> str:
        """`path` as the pod sees it, moved to where its volume lies here."""
        for mounted in sorted(self.mounts, key=len, reverse=True):
            if path == mounted or path.startswith(mounted.rstrip("/") + "/"):
                return str(self.mounts[mounted]) + path[len(mounted):]
        return path

    def localize(self, text: str) -> str:
        """Every mount path in `text` (a command line's word, server.yaml) moved, in one pass."""
        mounted = sorted(self.mounts, key=len, reverse=True)
        pattern = r"(?<![\w./-])(" + "|".join(re.escape(m) for m in mounted) + r")(?![\w.-])"
        return re.sub(pattern, lambda m: str(self.mounts[m.group(1)]), text)

    def _lay(self, out: Path, volume: dict[str, Any], mount: dict[str, Any]) -> Path:
        target = self.root / mount["mountPath"].lstrip("/")
        if "configMap" in volume:
            (cm,) = find(out, "ConfigMap", volume["configMap"]["name"])
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.write_text(cm["data"][mount["subPath"]])
        elif "secret" in volume:
            target.mkdir(parents=True, exist_ok=True)
            for key, value in secret_data(out, volume["secret"]["secretName"]).items():
                (target / key).write_text(value)
                (target / key).chmod(volume["secret"].get("defaultMode", 0o644))
        else:
            target.mkdir(parents=True, exist_ok=True)
        return target

    def finish(self, server_yaml_path: str) -> Path:
        """server.yaml with every path in it moved under `root`."""
        path = Path(self.local(server_yaml_path))
        path.write_text(self.localize(path.read_text()))
        return path


class LocalPod:
    """One control plane pod run here: its volumes laid out (PodFiles), the init container's command run, its
    ports moved to free ones (the pod has them to itself; this machine does not), its server command ready."""

    def __init__(self, out: Path, root: Path, *, index: int = 0, control: str = "{reconcile_interval: 1s}") -> None:
        import os
        import subprocess
        import sys

        from tests.conftest import free_port

        self.files = PodFiles(out, root)
        (init,) = self.files.pod["initContainers"]
        (self.server,) = self.files.pod["containers"]
        self.init = subprocess.run([self.files.localize(w) for w in init["command"]], capture_output=True, text=True)
        ports = {p["name"]: p["containerPort"] for p in self.server["ports"]}
        self.ports = {name: free_port() for name in (*ports, "admin")}
        self.config = self.files.finish("/etc/llmgw/server.yaml")
        text = self.config.read_text()
        for name, port in ports.items():
            text = text.replace(f'":{port}"', f'"127.0.0.1:{self.ports[name]}"')
        text = text.replace('"127.0.0.1:9090"', f'"127.0.0.1:{self.ports["admin"]}"')
        self.config.write_text(text.replace("models: []", f"control: {control}\nmodels: []"))
        # The pod's name, from the downward API as the kubelet gives it: the command picks its agent address by it.
        (name,) = [e for e in self.server["env"] if e["name"] == "POD_NAME"]
        assert name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        self.name = f"{control_plane(out)['metadata']['name']}-{index}"
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": self.name}
        self.env.pop("LLMGW_AGENT_ADVERTISE", None)
        shell, flag, script = self.server["command"]
        assert (shell, flag) == ("sh", "-c") and "exec python3 /opt/llmgw/llmgw.pyz server" in script
        # The zipapp's part: this checkout.
        self.script = self.files.localize(script).replace("python3 /opt/llmgw/llmgw.pyz", f"{sys.executable} -m llmgw")

    @property
    def command(self) -> list[str]:
        """The server container's command, as the pod's shell runs it (with `script` as moved here)."""
        return ["sh", "-c", self.script]

    def advertise_here(self, moved: dict[str, str]) -> None:
        """The agent addresses the command sets (HOST:PORT as agents outside dial them) moved to where they are here."""
        for address, here in moved.items():
            assert f"='{address}'" in self.script, (address, self.script)
            self.script = self.script.replace(f"='{address}'", f"='{here}'")

    def probe(self, name: str) -> str:
        get = self.server[name]["httpGet"]
        return f"http://127.0.0.1:{self.ports[get['port']]}{get['path']}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports['api']}{path}"

    def admin(self) -> list[str]:
        return ["--admin", f"http://127.0.0.1:{self.ports['admin']}", "--token-file", self.files.local("/run/llmgw/admin-token")]
