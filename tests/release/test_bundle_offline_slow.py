"""The issue's done-when: a bundle made here, imported into a fresh mirror, serves a model in a cluster with no
way out; the same bundle with one byte changed is refused.

"Outside" is the tests' Hugging Face stand-in (tests/mirror/conftest.py's FakeRegistry) in this machine's own
network. The site is a network namespace holding only a loopback interface (`ip netns`, as root): the mirror,
the control plane and the agent run there, with no route to anything else, so any fetch from outside would
fail; and the mirror, marked offline by the import, refuses one before trying, naming the setting.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from tests.mirror.conftest import FakeRegistry, blob
from tests.release.conftest import make_release

pytestmark = pytest.mark.slow

PY = sys.executable
GGUF = blob("offline-site", 400_000, b"GGUF")


def llmgw(*argv, netns: str | None = None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [PY, "-m", "llmgw", *[str(a) for a in argv]]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def netns():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 for a network namespace with no route out")
    name = f"llmgw-offline-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"ip netns add: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    procs: list[subprocess.Popen] = []
    try:
        yield name, procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        # the engines the agent started outlive it by design (a new agent adopts them): end whatever is left
        left = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def start(netns: str, procs: list, log: Path, *argv) -> subprocess.Popen:
    out = open(log, "wb")
    p = subprocess.Popen(["ip", "netns", "exec", netns, PY, "-m", "llmgw", *[str(a) for a in argv]],
                         stdout=out, stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def in_site(netns: str, code: str, timeout: float = 30) -> str:
    done = subprocess.run(["ip", "netns", "exec", netns, PY, "-c", code], capture_output=True, text=True,
                          timeout=timeout)
    return done.stdout + done.stderr


ASK = """
import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:18080/v1/chat/completions", method="POST",
    headers={"Content-Type": "application/json"},
    data=json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}).encode())
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print("STATUS", r.status, json.load(r)["choices"][0]["message"]["content"][:40])
except Exception as exc:
    print("FAILED", exc)
"""


def test_a_bundle_made_here_serves_a_model_at_a_site_with_no_way_out(tmp_path, netns):
    name, procs = netns
    # --- here, with "the internet": a release, a model fetched from the registry stand-in, an engine sdist
    keys = tmp_path / "keys"
    llmgw("release", "keygen", "--out", keys)
    release = make_release(tmp_path / "release-1.4.0")
    llmgw("release", "sign", "--key", keys / "llmgw-release.key", release)
    registry = FakeRegistry()
    registry.create("acme/tiny-GGUF", {"tiny.gguf": GGUF, "README.md": b"# tiny\n"})
    registry.start()
    try:
        here = tmp_path / "mirror-here"
        llmgw("mirror", "add", "acme/tiny-GGUF", "--file", "*.gguf", "--name", "tiny", "--dir", here,
              "--registry", registry.base, "--allow-private")
    finally:
        registry.stop()
    (here / "wheels").mkdir()
    (here / "wheels" / "llama_cpp_python-0.3.36.tar.gz").write_bytes(blob("sdist", 50_000, b"\x1f\x8b"))
    bundle = tmp_path / "llmgw-bundle.tar"
    made = json.loads(llmgw("bundle", "create", bundle, "--release", release, "--mirror", here, "--models", "tiny",
                            "--engines", "llama.cpp", "--key", keys / "llmgw-release.key", "--json").stdout)
    version = made["models"][0]["version"]

    # --- one byte changed: refused, naming the file, and the fresh mirror untouched
    damaged = tmp_path / "damaged.tar"
    shutil.copyfile(bundle, damaged)
    with tarfile.open(damaged) as tar:
        member = tar.getmember(f"models/tiny/{version}/tiny.gguf")
    with open(damaged, "r+b") as f:
        f.seek(member.offset_data + 12345)
        byte = f.read(1)
        f.seek(member.offset_data + 12345)
        f.write(bytes([byte[0] ^ 0x80]))
    site_mirror = tmp_path / "site" / "mirror"
    site_mirror.mkdir(parents=True)
    refused = llmgw("bundle", "import", damaged, "--mirror", site_mirror, "--trust", keys / "llmgw-release.pub",
                    netns=name, check=False)
    assert refused.returncode == 1
    assert f"models/tiny/{version}/tiny.gguf: its sha256 is" in refused.stderr
    assert list(site_mirror.iterdir()) == []

    # --- at the site: the good bundle into the fresh mirror, then a cluster that fetches nothing from outside
    llmgw("bundle", "import", bundle, "--mirror", site_mirror, "--trust", keys / "llmgw-release.pub",
          "--sha256", made["sha256"], netns=name)
    # the mirror refuses the registry by its setting, before any connection (and there is no route either)
    said = llmgw("mirror", "add", "acme/tiny-GGUF", "--dir", site_mirror, "--registry", "http://192.0.2.10:8080",
                 netns=name, check=False)
    assert said.returncode == 1 and "this mirror is offline" in said.stderr
    site = tmp_path / "site"
    start(name, procs, site / "mirror.log", "mirror", "serve", "--dir", site_mirror, "--base", "http://127.0.0.1:18081",
          "--listen", "127.0.0.1:18081", "--api-listen", "")
    (site / "server.yaml").write_text("\n".join([
        'listen: "127.0.0.1:18080"', 'admin_listen: "127.0.0.1:18090"',
        f'admin_token_file: "{site / "admin-token"}"', 'metrics_listen: ""', 'agent_listen: "127.0.0.1:18443"',
        "agent_insecure: true", "store:", f'  dsn: "{site / "llmgw.db"}"', "auth:", "  keys_required: false",
        "control:", "  reconcile_interval: 1s", "  backoff: {initial: 1s, max: 5s}",
        "mirror:", '  url: "http://127.0.0.1:18081"', "  offline: true",
        "models:", "  - name: tiny", "    engine: sim", f'    source: "mirror:tiny/{version}/tiny.gguf"',
        "    profiles: [{name: cpu}]", "    scaling: {min: 1, max: 1}", ""]))
    agent_dir = site / "agent"
    (site / "agent.yaml").write_text("\n".join([
        "node_id: site-node-1", 'control_planes: ["127.0.0.1:18443"]', "insecure: true",
        f'state_dir: "{agent_dir}"', f'weights_dir: "{agent_dir / "weights"}"',
        f'engines_dir: "{agent_dir / "engines"}"', "engine_host: 127.0.0.1", 'engine_user: ""', ""]))
    llmgw("config", "check", site / "server.yaml")
    start(name, procs, site / "server.log", "server", "--config", site / "server.yaml")
    start(name, procs, site / "agent.log", "agent", "--config", site / "agent.yaml")
    deadline = time.monotonic() + 120
    answer = ""
    while time.monotonic() < deadline:
        answer = in_site(name, ASK)
        if answer.startswith("STATUS 200"):
            break
        for p in procs:
            assert p.poll() is None, f"a process of the site stopped: {p.args}\n" + "\n".join(
                (site / n).read_text(errors="replace")[-3000:] for n in ("server.log", "agent.log", "mirror.log"))
        time.sleep(1)
    assert answer.startswith("STATUS 200"), answer + "\n" + (site / "agent.log").read_text(errors="replace")[-3000:]
    # the weights the engine was given are the bundle's, fetched from the site's mirror
    fetched = agent_dir / "weights" / "mirror" / "tiny" / version / "tiny.gguf"
    assert fetched.read_bytes() == GGUF
    # an engine the bundle did not bring is not asked of PyPI: the node knows the cluster is offline
    said = llmgw("ctl", "engine", "install", "site-node-1", "vllm", "--admin", "http://127.0.0.1:18090",
                 "--token-file", site / "admin-token", netns=name, check=False, timeout=90)
    assert said.returncode == 1 and "PyPI is not asked" in said.stdout + said.stderr, said.stdout + said.stderr
    assert "mirror.offline" in said.stdout + said.stderr
    # and from the site nothing outside can be reached at all
    assert "FAILED" in in_site(name, "import urllib.request\ntry:\n    urllib.request.urlopen("
                                     "'http://192.0.2.10/', timeout=3)\nexcept Exception as e:\n    print('FAILED', e)")
