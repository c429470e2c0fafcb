"""A real Prometheus (Debian's `prometheus`) scraping a running cluster: `llmgw up` (control plane and
gateway, an agent, the sim engine), a second agent on its own metrics listener and a mirror, all real
processes. Every dashboard query must return series, and the alert rules must load and evaluate.

No GPU here: both agents find cards through an `nvidia-smi` on their PATH that answers from the recorded
output of an HGX H100 node (tests/agent/discovery/data), as the discovery tests do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from up_started import up_started

from llmgw.config.load import load_server_config
from llmgw.obs.alerts import GROUPS
from llmgw.obs.dashboards import DASHBOARDS, all_queries
from llmgw.obs.monitoring_files import rules_yaml

from test_dashboards import grafana_variables_filled, metric_names

#: series that appear with their first event, which this cluster does not cause: counters of failures,
#: fallbacks, guard blocks and redactions, and a model's queue once a request has waited in it
AFTER_AN_EVENT = {
    "llmgw_upstream_retries_total", "llmgw_fallbacks_total", "llmgw_notifications_total",
    "llmgw_replica_start_failures_total", "llmgw_mirror_fetches_total", "llmgw_store_query_errors_total",
    "llmgw_queue_depth", "llmgw_tenant_guard_blocks_total", "llmgw_guard_redactions_total",
}

DISCOVERY_FAKES = Path(__file__).resolve().parents[1] / "agent" / "discovery" / "conftest.py"
SMI_RECORDING = "smi_h100x8.csv"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_nvidia_smi(folder: Path) -> Path:
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(f"""#!{sys.executable}
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("fakes", {str(DISCOVERY_FAKES)!r})
fakes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fakes)
with open(os.path.join(fakes.DATA, {SMI_RECORDING!r})) as f:
    smi = fakes.FakeSmi(f.read())
try:
    sys.stdout.write(smi(sys.argv[1:]))
except fakes.SmiError as e:
    print(e, file=sys.stderr)
    sys.exit(255)
""")
    script.chmod(0o755)
    return folder


def _get_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def _query(prom: str, expr: str) -> list:
    answer = _get_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


def _wait(what: str, check, within: float, procs: list[subprocess.Popen]):
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{p.args[:4]} exited with {p.returncode} while waiting for {what}"
        try:
            last = check()
            if last:
                return last
        except OSError as exc:  # not listening yet
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {within:.0f} s; last: {last!r}")


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_every_dashboard_query_returns_series_from_prometheus_scraping_a_running_cluster(tmp_path):
    import openai

    prometheus = shutil.which("prometheus")
    if prometheus is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing: apt-get install prometheus")
        pytest.skip("prometheus is missing (apt-get install prometheus)")
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{_fake_nvidia_smi(tmp_path / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}"}
    llmgw = [sys.executable, "-m", "llmgw"]
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, argv: list[str], **kw) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "w")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, **kw)
        procs.append(proc)
        return proc

    up = subprocess.Popen([*llmgw, "up", "--dir", str(tmp_path / "up"), "--port", "0", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        info = up_started(up)
        server = load_server_config(Path(info["dir"]) / "server.yaml")

        # A second node: an agent of its own, with its metrics listener on.
        agent_metrics = f"127.0.0.1:{_free_port()}"
        agent_dir = tmp_path / "agent2"
        agent_yaml = tmp_path / "agent2.yaml"
        agent_yaml.write_text("\n".join([
            "node_id: gpu-2",
            f"control_planes: [{json.dumps(server.agent_listen)}]",
            "insecure: true",
            f"state_dir: {json.dumps(str(agent_dir / 'state'))}",
            f"weights_dir: {json.dumps(str(agent_dir / 'weights'))}",
            f"engines_dir: {json.dumps(str(agent_dir / 'engines'))}",
            "engine_host: 127.0.0.1",
            'engine_user: ""',
            f"metrics_listen: {json.dumps(agent_metrics)}",
            "",
        ]))
        start("agent2", [*llmgw, "agent", "--config", str(agent_yaml)])

        # The mirror, with one model file to serve.
        mirror_dir = tmp_path / "mirror"
        (mirror_dir / "tiny" / "v1").mkdir(parents=True)
        (mirror_dir / "tiny" / "v1" / "weights.bin").write_bytes(os.urandom(4096))
        mirror_port = _free_port()
        mirror = f"127.0.0.1:{mirror_port}"
        mirror_proc = start("mirror", [*llmgw, "mirror", "serve", "--dir", str(mirror_dir),
                                       "--base", f"http://{mirror}", "--listen", mirror, "--api-listen", ""])

        # A budget on the project of up's key, so that its share spent is a series.
        subprocess.run([*llmgw, "ctl", "limits", "set", "project:local/up", "--budget-micros", "1000000000",
                        "--budget-period", "month", "--admin", info["admin_url"],
                        "--token-file", info["admin_token_file"]], env=env, check=True, capture_output=True)

        # The built-in baseline guard policy on the same project, so that its checks are counted.
        subprocess.run([*llmgw, "ctl", "guard", "attach", "project:local/up", "baseline",
                        "--config", str(Path(info["dir"]) / "server.yaml")], env=env, check=True, capture_output=True)

        # Traffic: answers, streamed answers (first token, time per token), a model that does not exist.
        client = openai.OpenAI(base_url=info["base_url"], api_key=info["api_key"])
        for _ in range(3):
            client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=8)
            stream = client.chat.completions.create(model=info["model"], stream=True, max_tokens=8,
                                                    messages=[{"role": "user", "content": "Hello there"}])
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])

        def mirror_get(path: str) -> int:
            try:
                with urllib.request.urlopen(f"http://{mirror}{path}", timeout=5) as resp:
                    resp.read()
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code

        _wait("the mirror", lambda: mirror_get("/tiny/v1/weights.bin") == 200, 60, procs)
        assert mirror_get("/tiny/v1/missing.bin") == 404

        # Prometheus, scraping every endpoint each second, with llmgw's rules.
        rules = tmp_path / "llmgw-rules.yml"
        rules.write_text(rules_yaml())
        prom_port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("\n".join([
            "global: {scrape_interval: 1s, evaluation_interval: 1s}",
            f"rule_files: [{json.dumps(str(rules))}]",
            "scrape_configs:",
            "  - job_name: llmgw-server",
            f"    static_configs: [{{targets: [{json.dumps(server.metrics_listen)}]}}]",
            "  - job_name: llmgw-agent",
            f"    static_configs: [{{targets: [{json.dumps(agent_metrics)}]}}]",
            "  - job_name: llmgw-mirror",
            f"    static_configs: [{{targets: [{json.dumps(mirror)}]}}]",
            "",
        ]))
        start("prometheus", [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"])
        prom = f"http://127.0.0.1:{prom_port}"

        seen: list = []

        def all_up():
            targets = _get_json(f"{prom}/api/v1/targets")["data"]["activeTargets"]
            seen[:] = [(t["labels"]["job"], t["health"], t["lastError"]) for t in targets]
            return len(seen) == 3 and all(health == "up" for _, health, _ in seen)

        try:
            _wait("every target up", all_up, 60, procs)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; targets: {seen}") from None
        # Both nodes' cards, relayed by the control plane; a few scrapes so that rate() has two samples.
        _wait("the second node's cards on the control plane",
              lambda: _query(prom, 'llmgw_gpu_temperature_celsius{job="llmgw-server",node="gpu-2"}'), 60, procs)
        def budget_checked():  # the gateway caches limits for a few seconds: ask until it has read the budget
            client.chat.completions.create(model=info["model"], messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=2)
            return _query(prom, "llmgw_budget_spent_ratio")

        _wait("the budget's share spent", budget_checked, 60, procs)
        # Each endpoint is scraped for its own: the agent's cards, the bytes the mirror sent.
        assert _query(prom, 'llmgw_gpu_memory_used_bytes{job="llmgw-agent",node="gpu-2"}')
        assert [float(r["value"][1]) for r in _query(prom, 'llmgw_mirror_bytes_served_total{job="llmgw-mirror"}')
                ] == [4096.0]
        time.sleep(4)

        empty = []
        for d in DASHBOARDS:
            for title, q in all_queries(d):
                if not _query(prom, grafana_variables_filled(q.expr)):
                    empty.append(f"{d.uid} / {title}: {q.expr}")
        assert empty == [], "dashboard queries that return no series:\n" + "\n".join(empty)
        # A query that reads 0 where its metric has no series yet (`or vector(0)`) still returns one: each
        # metric a panel reads must have been scraped, but for those made by their first event.
        read = {n for d in DASHBOARDS for _, q in all_queries(d) for n in metric_names(q.expr)}
        never = sorted(n for n in read if not _query(prom, f'count({{__name__="{n}"}})'))
        assert set(never) <= AFTER_AN_EVENT, never

        def rules_evaluated():
            groups = _get_json(f"{prom}/api/v1/rules")["data"]["groups"]
            evaluated = all(r.get("lastEvaluation", "").startswith("20") for g in groups for r in g["rules"])
            return groups if groups and evaluated else None

        groups = _wait("every rule evaluated", rules_evaluated, 30, procs)
        assert sorted(g["name"] for g in groups) == sorted(g.name for g in GROUPS)
        broken = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
        assert broken == [], "rules that fail to evaluate on the cluster's series"
        assert sum(len(g["rules"]) for g in groups) == sum(len(g.alerts) for g in GROUPS)
        # A healthy cluster: nothing that says something is broken fires.
        firing = _get_json(f"{prom}/api/v1/alerts")["data"]["alerts"]
        assert [a["labels"]["alertname"] for a in firing if a["labels"]["severity"] == "critical"] == []

        # The mirror stops: its endpoint's alert is pending at once (it fires after three minutes of it).
        _stop(mirror_proc)
        procs.remove(mirror_proc)

        def mirror_down():
            alerts = _get_json(f"{prom}/api/v1/alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "LlmgwEndpointDown"]

        [down] = _wait("LlmgwEndpointDown for the mirror", mirror_down, 30, procs)
        assert (down["labels"]["job"], down["state"]) == ("llmgw-mirror", "pending")
        assert down["annotations"]["summary"] == f"llmgw-mirror at {mirror} has not answered a scrape for three minutes"
    finally:
        for proc in reversed(procs):
            _stop(proc)
        _stop(up, signal.SIGINT)
        up.stdout.close()
        up.stderr.close()
