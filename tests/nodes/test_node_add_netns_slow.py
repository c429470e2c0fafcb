"""Machines as Linux network namespaces: a control plane, a node added over SSH, a node joined with a code.

Three namespaces joined by veth pairs to a bridge in the first, addresses in
10.213.1.0/24 only inside them; sshd runs in the second. Traffic stays in
the namespaces and on loopback: the openai SDK runs inside the control
plane's namespace too. Everything made is removed at the end, even on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from llmgw import pki

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
NS = {"cp": "llmgwt-cp", "a": "llmgwt-a", "b": "llmgwt-b"}
ADDR = {"cp": "10.213.1.1", "a": "10.213.1.2", "b": "10.213.1.3"}
NOSUDO_USER = "llmgwt-nosudo"
SSH_PORT = 2222
tmp_dirs: list[Path] = []

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/sshd"),
                                 reason="needs root, iproute2 and openssh-server")]


def sh(*argv: str, check: bool = True, ns: str | None = None, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    if ns is not None:
        argv = ("ip", "netns", "exec", NS[ns], *argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def remove_namespaces() -> None:
    for ns in NS.values():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def hosts(tmp_path):
    remove_namespaces()  # what a killed run left
    try:
        for ns in NS.values():
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns="cp")
        sh("ip", "link", "add", "br0", "type", "bridge", ns="cp")
        sh("ip", "addr", "add", f"{ADDR['cp']}/24", "dev", "br0", ns="cp")
        sh("ip", "link", "set", "br0", "up", ns="cp")
        for name in ("a", "b"):
            sh("ip", "link", "add", f"llmgwt-{name}0", "netns", NS["cp"], "type", "veth", "peer", "name", "eth0",
               "netns", NS[name])
            sh("ip", "link", "set", f"llmgwt-{name}0", "master", "br0", "up", ns="cp")
            sh("ip", "addr", "add", f"{ADDR[name]}/24", "dev", "eth0", ns=name)
            sh("ip", "link", "set", "eth0", "up", ns=name)
            sh("ip", "link", "set", "lo", "up", ns=name)
        yield tmp_path
    finally:
        remove_namespaces()
        subprocess.run(["userdel", "-r", NOSUDO_USER], capture_output=True)
        while tmp_dirs:
            shutil.rmtree(tmp_dirs.pop(), ignore_errors=True)


def start_sshd(tmp: Path) -> tuple[Path, Path]:
    """sshd in namespace a, with a host key and a user key made here; root logs in by key."""
    # Outside pytest's private tmp: sshd reads the keys as the user logging in, who must reach them.
    d = Path(tempfile.mkdtemp(prefix="llmgwt-ssh-"))
    tmp_dirs.append(d)
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "user_key"))
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o644)
    os.chmod(d, 0o755)
    (d / "sshd_config").write_text(
        f"Port {SSH_PORT}\nListenAddress {ADDR['a']}\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.Popen(["ip", "netns", "exec", NS["a"], "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                     stdout=open(d / "sshd.log", "w"), stderr=subprocess.STDOUT)
    hostkey = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[{ADDR['a']}]:{SSH_PORT} {hostkey[0]} {hostkey[1]}\n")
    for _ in range(100):
        if sh("bash", "-c", f"exec 3<>/dev/tcp/{ADDR['a']}/{SSH_PORT}", ns="cp", check=False).returncode == 0:
            break
        time.sleep(0.1)
    return d / "user_key", d / "known_hosts"


def start_control_plane(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "cp"
    etc = root / "etc/llmgw"
    pki.init_ca(etc / "ca")
    pki.issue_server(etc / "ca", "cp", [ADDR["cp"]], etc / "tls")
    state = root / "var/lib/llmgw"
    state.mkdir(parents=True)
    token = state / "admin-token"
    config = etc / "server.yaml"
    config.write_text("\n".join([
        f'listen: "{ADDR["cp"]}:8080"', 'admin_listen: "127.0.0.1:9090"', f'admin_token_file: "{token}"',
        'metrics_listen: ""', f'agent_listen: "{ADDR["cp"]}:7443"',
        "agent_tls:", f'  cert: "{etc}/tls/server.pem"', f'  key: "{etc}/tls/server-key.pem"',
        f'  ca: "{etc}/tls/ca.pem"',
        "store:", f'  dsn: "{state}/llmgw.db"', "auth:", "  keys_required: false",
        "control:", "  reconcile_interval: 1s",
        "models:", "  - name: sim-two", "    engine: sim", "    profiles:", "      - name: cpu",
        "    scaling: {min: 2, max: 2}", ""]))
    log = open(tmp / "server.log", "w")
    subprocess.Popen(["ip", "netns", "exec", NS["cp"], PY, "-m", "llmgw", "server", "--config", str(config)],
                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    for _ in range(300):
        if token.exists() and sh("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090", ns="cp", check=False).returncode == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError((tmp / "server.log").read_text()[-3000:])
    return config, token


def ctl(token: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh(PY, "-m", "llmgw", *args, "--admin", "http://127.0.0.1:9090", "--token-file", str(token),
              ns="cp", check=check, cwd=ROOT)


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_node_add_over_ssh_join_with_a_code_and_two_replicas_answer(hosts, tmp_path):
    key, known = start_sshd(tmp_path)
    _, token = start_control_plane(tmp_path)
    ssh = ["-i", str(key), "--port", str(SSH_PORT), "-o", f"UserKnownHostsFile={known}"]

    # An unreachable host, and a user without sudo: each a sentence, nothing left behind.
    down = ctl(token, "node", "add", "root@10.213.1.9", *ssh, "--name", "x", check=False)
    assert down.returncode == 1 and "cannot reach root@10.213.1.9" in down.stderr, down.stderr
    sh("useradd", "-m", "-s", "/bin/sh", NOSUDO_USER)
    sh("usermod", "-p", "*", NOSUDO_USER)  # no password, but not locked: sshd lets a key in
    nosudo = ctl(token, "node", "add", f"{NOSUDO_USER}@{ADDR['a']}", *ssh, "--name", "x", check=False)
    assert nosudo.returncode == 1 and "is not root and has no sudo without a password" in nosudo.stderr, nosudo.stderr

    # Node b with a code, run on the machine itself.
    made = json.loads(ctl(token, "ctl", "node", "join-code", "--json").stdout)
    listed = ctl(token, "ctl", "node", "join-codes").stdout
    assert made["id"] in listed and made["code"] not in listed
    root_b = tmp_path / "node-b"
    joined = sh(PY, "-m", "llmgw", "join", made["code"], "--root", str(root_b), "--name", "node-b", ns="b",
                check=False, cwd=ROOT)
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "node node-b registered" in joined.stdout

    # The code again, and a code for another CA: refused, nothing written.
    again = sh(PY, "-m", "llmgw", "join", made["code"], "--root", str(tmp_path / "again"), "--name", "node-c",
               ns="b", check=False, cwd=ROOT)
    assert again.returncode == 1 and "already used, by node 'node-b'" in again.stderr, again.stderr
    assert tree(tmp_path / "again") == []
    from llmgw.control.join_codes import parse_code

    fresh = parse_code(json.loads(ctl(token, "ctl", "node", "join-code", "--json").stdout)["code"])
    other = type(fresh)(id=fresh.id, secret=fresh.secret, ca_sha256="ab" * 32, addresses=fresh.addresses,
                        expires_at=fresh.expires_at)
    foreign = sh(PY, "-m", "llmgw", "join", other.text(), "--root", str(tmp_path / "foreign"), "--name", "z",
                 ns="b", check=False, cwd=ROOT)
    assert foreign.returncode == 1 and "another cluster" in foreign.stderr, foreign.stderr
    assert tree(tmp_path / "foreign") == []

    pyz = ROOT / "dist/llmgw.pyz"
    newest = max(p.stat().st_mtime for p in (ROOT / "llmgw").rglob("*.py"))
    if not pyz.exists() or pyz.stat().st_mtime < newest:  # node add copies the built file: this tree's
        sh(PY, str(ROOT / "build.py"), timeout=600)
    # Node a over SSH: checks, copies the file, joins with a fresh code, waits until ready.
    root_a = tmp_path / "node-a"
    added = ctl(token, "node", "add", f"root@{ADDR['a']}", *ssh, "--name", "node-a", "--root", str(root_a),
                check=False)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "no systemd: the agent is started directly" in added.stdout
    assert "node node-a is ready" in added.stdout
    assert not [p for p in Path("/tmp").glob("llmgw-add.*") if p.is_dir()], "the copy was not removed"
    assert oct(os.stat(root_a / "etc/llmgw/tls/node-key.pem").st_mode & 0o777) == "0o600"

    # Two replicas, one on each node, answering through the gateway (the SDK inside the namespace).
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        replicas = json.loads(ctl(token, "ctl", "replicas", "--json").stdout)["replicas"]
        ready = sorted(r["node"] for r in replicas if r["state"] == "ready")
        if ready == ["node-a", "node-b"]:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"replicas: {replicas}\n{(tmp_path / 'server.log').read_text()[-3000:]}")
    client = (
        "import openai\n"
        f"c = openai.OpenAI(base_url='http://{ADDR['cp']}:8080/v1', api_key='unused')\n"
        "seen = set()\n"
        "for _ in range(6):\n"
        "    r = c.chat.completions.create(model='sim-two', messages=[{'role': 'user', 'content': 'hi'}],"
        " max_tokens=4)\n"
        "    assert r.choices[0].message.content\n"
        "print('ok')\n")
    answered = sh(PY, "-c", client, ns="cp", check=False)
    assert answered.returncode == 0 and "ok" in answered.stdout, answered.stdout + answered.stderr
