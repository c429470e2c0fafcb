"""What the metrics tests share: `promtool check metrics` on an exposition, reading samples from one,
and the recorded NVML and nvidia-smi fakes of tests/agent/discovery."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from llmgw.obs.metric_defs import for_role

DISCOVERY = Path(__file__).resolve().parents[1] / "agent" / "discovery"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def promtool_problems(text: str) -> list[str]:
    """What `promtool check metrics` (Debian's prometheus package) says of an exposition; [] when clean."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install -y prometheus (CI's .ci/run installs it)"
    done = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    said = (done.stdout + done.stderr).decode().strip()
    assert done.returncode in (0, 3) or said, f"promtool failed: rc {done.returncode}"
    return [line for line in said.splitlines() if line.strip()]


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample as {(name, frozenset(labels.items())): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, metric: str, **labels: str) -> float | None:
    """The one sample of `metric` whose labels include `labels`; None when there is none."""
    found = [v for (n, ls), v in samples(text).items() if n == metric and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{metric}{labels}: {len(found)} samples"
    return found[0] if found else None


def openmetrics_values(text: str) -> dict[tuple[str, str], float]:
    """An OpenMetrics exposition read by prometheus_client's strict OpenMetrics parser (it fails on anything
    malformed, the final `# EOF` included): {(sample name, its gpu label or ""): value}."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    return {(s.name, s.labels.get("gpu", "")): s.value
            for family in parse_openmetrics(text) for s in family.samples}


def undeclared(text: str, role: str) -> list[str]:
    """Families on the endpoint that llmgw/obs/metric_defs.py does not list for `role`, or lists with another
    type or other labels."""
    defs = {d.family: d for d in for_role(role)}
    wrong = []
    for family in text_string_to_metric_families(text):
        d = defs.get(family.name)
        if d is None:
            wrong.append(f"{family.name}: not in metric_defs for {role}")
            continue
        if family.type != d.type:
            wrong.append(f"{family.name}: {family.type}, defined as {d.type}")
        for s in family.samples:
            extra = set(s.labels) - set(d.labels) - {"le"}
            if extra and not (d.name == "llmgw_requests_total"):
                wrong.append(f"{s.name}: labels {sorted(extra)} not defined")
    return wrong


def discovery_fakes():
    """tests/agent/discovery/conftest.py as a module: FakeNvml, FakeSmi, load_recording, DATA."""
    spec = importlib.util.spec_from_file_location("llmgw_test_discovery_fakes", DISCOVERY / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
