"""`llmgw ctl upgrade` end to end: a control plane, the mirror's file server and a real agent process run from
llmgw's zipapp, serving a sim engine; the agent moved to a second build and back while a client keeps asking
through the gateway. The agent's version changes, its pid and its engine's pid stay; a release signed by a key
the cluster does not trust is refused and nothing changes.

The first build is dist/llmgw.pyz (built from this tree when it lacks the agent's upgrade code as the tree has
it); the second is the same file re-stamped as another version (upgrade_helpers.restamp_zipapp).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from upgrade_helpers import PY, Load, cached_pyz, children, ctl, free_port, make_key, release_folder, restamp_zipapp

from llmgw.agent.self_upgrade import zipapp_version
from llmgw.release.store import add_release

pytestmark = pytest.mark.slow

NEXT = "0.1.0.post1"


def test_ctl_upgrade_moves_a_real_agent_to_the_next_build_and_back_while_its_engine_keeps_serving(tmp_path):
    first = cached_pyz()
    base = zipapp_version(first)
    node = tmp_path / "node"
    node.mkdir()
    program = node / "llmgw.pyz"
    shutil.copyfile(first, program)
    program.chmod(0o755)
    # --- the releases: the next build signed by the cluster's key; another signed by a key it does not trust
    private, trust, public = make_key(tmp_path / "keys")
    stranger, stranger_trust, _ = make_key(tmp_path / "stranger-keys")
    second = restamp_zipapp(first, tmp_path / "second.pyz", NEXT)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    add_release(mirror, release_folder(tmp_path / "rel-next", NEXT, private, zipapps={"x86_64": second}), trust)
    add_release(mirror, release_folder(tmp_path / "rel-bad", "0.1.0.post2", stranger), stranger_trust)
    second.unlink()

    ports = {k: free_port() for k in ("gateway", "admin", "agent", "mirror")}
    ports["engines"] = 30000 + os.getpid() % 20000
    (tmp_path / "server.yaml").write_text("\n".join([
        f'listen: "127.0.0.1:{ports["gateway"]}"', f'admin_listen: "127.0.0.1:{ports["admin"]}"',
        f'admin_token_file: "{tmp_path / "admin-token"}"', 'metrics_listen: ""',
        f'agent_listen: "127.0.0.1:{ports["agent"]}"', "agent_insecure: true",
        "store:", f'  dsn: "{tmp_path / "llmgw.db"}"', "auth:", "  keys_required: false",
        "control:", "  reconcile_interval: 500ms", "  backoff: {initial: 1s, max: 5s}",
        "mirror:", f'  url: "http://127.0.0.1:{ports["mirror"]}"',
        "releases:", f'  trusted_keys: ["{public}"]',
        "models:", "  - name: tiny", "    engine: sim", "    profiles: [{name: cpu}]", "    scaling: {min: 1, max: 1}",
        ""]))
    state = tmp_path / "agent"
    (tmp_path / "agent.yaml").write_text("\n".join([
        "node_id: node-1", f'control_planes: ["127.0.0.1:{ports["agent"]}"]', "insecure: true",
        f'state_dir: "{state}"', f'weights_dir: "{state / "weights"}"', f'engines_dir: "{state / "engines"}"',
        "engine_host: 127.0.0.1", 'engine_user: ""', f'engine_ports: "{ports["engines"]}-{ports["engines"] + 20}"',
        "releases:", f'  trusted_keys: ["{public}"]', ""]))
    admin = ["--admin", f"http://127.0.0.1:{ports['admin']}", "--token-file", tmp_path / "admin-token"]
    env = dict(os.environ, SHIV_ROOT=str(tmp_path / "unpacked"))
    env.pop("LLMGW_PYZ", None)
    logs = {n: open(tmp_path / f"{n}.log", "wb") for n in ("mirror", "server", "agent")}
    procs = {
        "mirror": subprocess.Popen([PY, "-m", "llmgw", "mirror", "serve", "--dir", mirror, "--listen",
                                    f"127.0.0.1:{ports['mirror']}", "--base", f"http://127.0.0.1:{ports['mirror']}",
                                    "--api-listen", ""], stdout=logs["mirror"], stderr=subprocess.STDOUT),
        "server": subprocess.Popen([PY, "-m", "llmgw", "server", "--config", tmp_path / "server.yaml"],
                                   stdout=logs["server"], stderr=subprocess.STDOUT),
    }

    engines: set[int] = set()

    def said() -> str:
        return "\n".join(f"--- {n}.log\n" + (tmp_path / f"{n}.log").read_text(errors="replace")[-4000:]
                         for n in ("server", "agent", "mirror"))

    try:
        procs["agent"] = subprocess.Popen([PY, program, "agent", "--config", tmp_path / "agent.yaml"], env=env,
                                          stdout=logs["agent"], stderr=subprocess.STDOUT)
        agent = procs["agent"]
        load = Load(f"http://127.0.0.1:{ports['gateway']}/v1/chat/completions")
        deadline = time.monotonic() + 180
        while load._ask():
            for name, p in procs.items():
                assert p.poll() is None, f"{name} stopped\n{said()}"
            assert time.monotonic() < deadline, f"tiny never answered\n{said()}"
            time.sleep(0.5)

        def agent_version() -> str:
            [n] = json.loads(ctl("nodes", "--json", *admin).stdout)["nodes"]
            return n["agent_version"]

        assert agent_version() == base
        engines = children(agent.pid)
        assert engines, "the sim engine is not the agent's child"
        before = program.read_bytes()

        # --- signed by a key the cluster does not trust: refused before anything is sent; nothing changes
        refused = ctl("upgrade", "0.1.0.post2", *admin, check=False)
        assert refused.returncode != 0
        assert "which is not trusted here" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
        assert program.read_bytes() == before and not (node / "llmgw.pyz.previous").exists()
        assert agent_version() == base and agent.poll() is None and children(agent.pid) == engines

        # --- to the next build, under load
        with load:
            upgraded = ctl("upgrade", NEXT, *admin)
            time.sleep(2)
        out = upgraded.stdout
        assert f"node-1: back with llmgw {NEXT} (was {base})" in out and "1 engine kept, same pids" in out, out
        assert "done: 1 node(s) upgraded" in out, out
        assert agent_version() == NEXT
        assert agent.poll() is None and children(agent.pid) == engines  # the same agent process, the same engine
        assert zipapp_version(program) == NEXT and (node / "llmgw.pyz.previous").read_bytes() == before
        print(f"during the upgrade: {load.ok} answered, {len(load.failures)} failed: {load.failures[:5]}")
        assert load.ok > 0 and not load.failures, load.failures[:10]

        # --- back to the file before
        back = Load(load.url)
        with back:
            went = ctl("upgrade", "--back", *admin)
            time.sleep(2)
        assert f"node-1: back with llmgw {base} (was {NEXT})" in went.stdout, went.stdout
        assert agent_version() == base and program.read_bytes() == before
        assert agent.poll() is None and children(agent.pid) == engines
        print(f"during the way back: {back.ok} answered, {len(back.failures)} failed: {back.failures[:5]}")
        assert back.ok > 0 and not back.failures, back.failures[:10]
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        for pid in engines:  # engines outlive their agent, by design
            try:
                os.kill(pid, 9)
            except OSError:
                pass
