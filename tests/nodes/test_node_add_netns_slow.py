"""Three machines as Linux network namespaces: a control plane made by `server init`, a node added over SSH,
a node joined with a code; a model's two replicas on the two nodes, `doctor` clean on all three, and a node
wiped out of the cluster.

Three namespaces joined by veth pairs to a bridge in the first, addresses in
10.213.1.0/24 only inside them; sshd (Debian's openssh-server) runs in the
second. Every llmgw command is the built zipapp, as an operator runs it;
the openai SDK runs in the third namespace, a client on another machine.
Everything made is removed at the end, even on failure.
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
from tmux_screen import Screen

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable  # the test's own Python: the openai SDK
NS = {"cp": "llmgwt-cp", "a": "llmgwt-a", "b": "llmgwt-b"}
ADDR = {"cp": "10.213.1.1", "a": "10.213.1.2", "b": "10.213.1.3"}
NOSUDO_USER = "llmgwt-nosudo"
SSH_PORT = 2222
ADMIN, PASSWORD = "admin@example.com", "a-long-first-password-7"
tmp_dirs: list[Path] = []

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/sshd"),
                                 reason="needs root, iproute2 and openssh-server")]


def sh(*argv: str, check: bool = True, ns: str | None = None, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
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


@pytest.fixture(scope="module")
def pyz():
    try:
        from llmgw.testing.zipapp import fresh_pyz  # the build the zipapp tests share
    except ImportError:  # pragma: no cover - an older tree
        def fresh_pyz() -> Path:
            built = ROOT / "dist/llmgw.pyz"
            newest = max(p.stat().st_mtime for p in (ROOT / "llmgw").rglob("*.py"))
            if not built.exists() or built.stat().st_mtime < newest:
                sh(PY, str(ROOT / "build.py"), timeout=900, cwd=ROOT)
            return built
    return fresh_pyz()


@pytest.fixture
def hosts():
    """The three namespaces; yields a folder open to others (engines run as llmgw-engine and read from it)."""
    remove_namespaces()  # what a killed run left
    engine_user = subprocess.run(["id", "llmgw-engine"], capture_output=True).returncode == 0
    base = Path(tempfile.mkdtemp(prefix="llmgwt-"))
    os.chmod(base, 0o755)
    tmp_dirs.append(base)
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
        yield base
    finally:
        remove_namespaces()
        subprocess.run(["userdel", "-r", NOSUDO_USER], capture_output=True)
        if not engine_user:  # made by an agent here on its first engine start
            subprocess.run(["userdel", "llmgw-engine"], capture_output=True)
        while tmp_dirs:
            shutil.rmtree(tmp_dirs.pop(), ignore_errors=True)


def start_sshd() -> tuple[Path, Path]:
    """sshd in namespace a, with a host key and a user key made here; root logs in by key."""
    # Outside pytest's private tmp: sshd reads the keys as the user logging in, who must reach them.
    d = Path(tempfile.mkdtemp(prefix="llmgwt-ssh-"))
    tmp_dirs.append(d)
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "user_key"))
    # A clean environment for each command, as on a fresh machine: this one's root shell puts a Python under
    # /root (closed to others, so to the engine user) first on PATH.
    clean = 'command="env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root sh -c \\"$SSH_ORIGINAL_COMMAND\\"" '
    (d / "authorized_keys").write_text(clean + (d / "user_key.pub").read_text())
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


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


class Machine:
    """One namespace and the --root its llmgw lives under."""

    def __init__(self, ns: str, root: Path, pyz: Path) -> None:
        self.ns, self.root, self.pyz = ns, root, pyz

    def llmgw(self, *args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
        return sh("/usr/bin/python3", str(self.pyz), *args, ns=self.ns, check=check, **kw)


def test_three_machines_init_node_add_join_spread_doctor_and_wipe(hosts, pyz):
    tmp_path = hosts
    key, known = start_sshd()
    cp = Machine("cp", tmp_path / "cp", pyz)
    token = cp.root / "var/lib/llmgw/admin-token"
    admin = ["--admin", "http://127.0.0.1:9090", "--token-file", str(token)]

    def ctl(*args: str) -> subprocess.CompletedProcess:
        return sh(PY, "-m", "llmgw", "ctl", *args, *admin, ns="cp", cwd=ROOT)

    def server_log() -> str:
        path = cp.root / "var/log/llmgw/server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no server log)"

    # 1. The control plane, by `server init` from the zipapp.
    started = time.monotonic()
    init = cp.llmgw("server", "init", "--yes", "--root", str(cp.root), "--host", ADDR["cp"],
                    "--agent-listen", f"{ADDR['cp']}:7443", "--admin", ADMIN, "--admin-password", PASSWORD,
                    "--wait", "90")
    assert init.returncode == 0, init.stdout + init.stderr + server_log()
    assert "The control plane answers." in init.stdout
    binary = cp.root / "usr/local/lib/llmgw/llmgw.pyz"
    assert binary.stat().st_size == pyz.stat().st_size  # init copied the file it runs from
    unit = (cp.root / "etc/systemd/system/llmgw-server.service").read_text()
    assert f"ExecStart=/usr/bin/python3 {binary} server --config {cp.root}/etc/llmgw/server.yaml" in unit
    print(f"server init: {time.monotonic() - started:.1f} s")

    # 2. Node a over SSH. First an unreachable host and a user without sudo: each a sentence.
    ssh = ["-i", str(key), "--port", str(SSH_PORT), "-o", f"UserKnownHostsFile={known}"]
    down = cp.llmgw("node", "add", "root@10.213.1.9", *ssh, "--name", "x", *admin)
    assert down.returncode == 1 and "cannot reach root@10.213.1.9" in down.stderr, down.stdout + down.stderr
    sh("useradd", "-m", "-s", "/bin/sh", NOSUDO_USER)
    sh("usermod", "-p", "*", NOSUDO_USER)  # no password, but not locked: sshd lets a key in
    nosudo = cp.llmgw("node", "add", f"{NOSUDO_USER}@{ADDR['a']}", *ssh, "--name", "x", *admin)
    assert nosudo.returncode == 1 and "is not root and has no sudo without a password" in nosudo.stderr, nosudo.stderr
    a = Machine("a", tmp_path / "node-a", tmp_path / "node-a/usr/local/lib/llmgw/llmgw.pyz")
    started = time.monotonic()
    added = cp.llmgw("node", "add", f"root@{ADDR['a']}", *ssh, "--name", "node-a", "--root", str(a.root), *admin)
    assert added.returncode == 0, added.stdout + added.stderr + server_log()
    assert "no systemd: the agent is started directly" in added.stdout
    assert "node node-a is ready" in added.stdout
    assert not [p for p in Path("/tmp").glob("llmgw-add.*") if p.is_dir()], "the copy was not removed"
    assert oct(os.stat(a.root / "etc/llmgw/tls/node-key.pem").st_mode & 0o777) == "0o600"
    print(f"node add: {time.monotonic() - started:.1f} s")

    # 3. Node b with a code, pasted on the machine itself.
    made = json.loads(ctl("node", "join-code", "--json").stdout)
    assert made["code"] not in ctl("node", "join-codes").stdout
    b = Machine("b", tmp_path / "node-b", pyz)
    joined = b.llmgw("join", made["code"], "--root", str(b.root), "--name", "node-b")
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "node node-b registered" in joined.stdout
    again = b.llmgw("join", made["code"], "--root", str(tmp_path / "again"), "--name", "node-c")
    assert again.returncode == 1 and "already used, by node 'node-b'" in again.stderr, again.stderr
    assert tree(tmp_path / "again") == []

    # 4. A model of two replicas: placement spreads one model's replicas over nodes (fewest of it first).
    model = "name: sim-two\nengine: sim\nprofiles:\n  - name: cpu\nscaling: {min: 2, max: 2}\n"
    sh(PY, "-m", "llmgw", "ctl", "model", "add", "-", *admin, ns="cp", cwd=ROOT, input=model)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        replicas = json.loads(ctl("replicas", "--json").stdout)["replicas"]
        ready = sorted(r["node"] for r in replicas if r["state"] == "ready" and r["model"] == "sim-two")
        if len(ready) == 2:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"replicas: {replicas}\n{server_log()}")
    assert ready == ["node-a", "node-b"], replicas

    issued = json.loads(ctl("keys", "create", "--user", ADMIN, "--name", "netns", "--json").stdout)
    secret = issued.get("secret") or issued.get("key")
    client = (
        "import openai\n"
        f"c = openai.OpenAI(base_url='http://{ADDR['cp']}:8080/v1', api_key={secret!r})\n"
        "for _ in range(4):\n"
        "    r = c.chat.completions.create(model='sim-two', messages=[{'role': 'user', 'content': 'hi'}],"
        " max_tokens=4)\n"
        "    assert r.choices[0].message.content\n"
        "print('answered')\n")
    answered = sh(PY, "-c", client, ns="b", check=False)
    assert answered.returncode == 0 and "answered" in answered.stdout, answered.stdout + answered.stderr

    # 5. doctor: clean on all three (warnings, such as a small disk, leave it 0).
    for machine in (cp, a, b):
        doctor = machine.llmgw("doctor", "--root", str(machine.root), "--json")
        report = json.loads(doctor.stdout or "{}")
        problems = [f for f in report.get("findings", []) if f["status"] == "problem"]
        assert doctor.returncode == 0 and not problems, (machine.ns, problems, doctor.stderr)

    # 6. Wipe node a: the control plane forgets it and revokes its certificate; the machine is bare again.
    kept = Path(tempfile.mkdtemp(prefix="llmgwt-cert-"))  # node a's certificate, to try it once it has left
    tmp_dirs.append(kept)
    for name in ("node.pem", "node-key.pem", "ca.pem"):
        shutil.copy(a.root / "etc/llmgw/tls" / name, kept / name)
    pid_file = a.root / "var/lib/llmgw/llmgw-agent.pid"
    agent_pid = int(pid_file.read_text())
    wiped = sh("/usr/bin/python3", str(a.pyz), "wipe", "--yes", "--root", str(a.root), ns="a", check=False)
    assert wiped.returncode == 0, wiped.stdout + wiped.stderr
    assert "node node-a left the cluster, its certificate is revoked" in wiped.stdout, wiped.stdout
    assert tree(a.root) == [], tree(a.root)
    assert not Path(f"/proc/{agent_pid}").exists() or "Z" in Path(f"/proc/{agent_pid}/stat").read_text().split()[2]
    listed = [n["id"] for n in json.loads(ctl("nodes", "--json").stdout)["nodes"]]
    assert listed == ["node-b"], listed
    audit = ctl("audit", "--json").stdout
    assert "nodes.leave" in audit and "node:node-a" in audit
    replicas = json.loads(ctl("replicas", "--json").stdout)["replicas"]
    assert not [r for r in replicas if r["node"] == "node-a"], replicas
    # Its replica is placed again on the node left, and its certificate no longer registers.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        replicas = json.loads(ctl("replicas", "--json").stdout)["replicas"]
        if sorted(r["node"] for r in replicas if r["state"] == "ready" and r["model"] == "sim-two") == ["node-b"] * 2:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"replicas: {replicas}\n{server_log()}")
    dial = (
        "import asyncio, ssl, aiohttp\n"
        f"ctx = ssl.create_default_context(cafile='{kept}/ca.pem')\n"
        f"ctx.load_cert_chain('{kept}/node.pem', '{kept}/node-key.pem')\n"
        "async def main():\n"
        "    async with aiohttp.ClientSession() as s:\n"
        f"        async with s.ws_connect('wss://{ADDR['cp']}:7443/agent/v1', ssl=ctx) as ws:\n"
        "            print((await ws.receive(timeout=10)).data)\n"
        "asyncio.run(main())\n")
    refused = sh(PY, "-c", dial, ns="a", check=False)
    assert "revoked" in refused.stdout, refused.stdout + refused.stderr

    # 7. Node a back, from the console's Do → Add a node over SSH (node add's own code), with a new code.
    if shutil.which("tmux") is None:
        return
    screen = Screen(f"llmgwt-netns-{os.getpid()}", "console")
    try:
        console = (f"cd {ROOT} && exec ip netns exec {NS['cp']} {PY} -m llmgw console --admin http://127.0.0.1:9090 "
                   f"--token-file {token} --actor tmux")
        screen.start(console, width=120, height=45)
        screen.wait_for("nodes: 1 ready")
        for _ in range(30):
            screen.keys("Down")
            if "Two ways to make a machine a node" in screen.text():
                break
        screen.keys("Right", "Enter")
        screen.wait_for("Add a machine over SSH")
        screen.keys("Down", "Enter")
        screen.wait_for("[user@]host, as ssh takes it")
        screen.keys(f"root@{ADDR['a']}", literal=True)
        screen.keys("Enter", "BSpace", "BSpace")
        for value in (str(SSH_PORT), str(key), f"UserKnownHostsFile={known}", "node-a"):
            screen.keys(value, literal=True)
            screen.keys("Enter")
        screen.keys("BSpace")
        screen.keys(str(a.root), literal=True)
        screen.keys("Enter", "Enter")
        screen.wait_for("Node node-a is ready", timeout=120)
        screen.keys("Enter")
        shown = screen.wait_for("The last node add")
        assert f"checking root@{ADDR['a']} (port {SSH_PORT})" in shown, shown
    finally:
        screen.close()
    listed = [n["id"] for n in json.loads(ctl("nodes", "--json").stdout)["nodes"]]
    assert sorted(listed) == ["node-a", "node-b"]
