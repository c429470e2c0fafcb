"""Who engines run as and where they listen: the pieces, without starting an engine."""

from __future__ import annotations

import os
import sys

import pytest

from llmgw.agent.engine_user import (
    EngineUser, EngineUserError, as_engine_user, listen_address, management_address, runnable_argv, unreachable_part,
)
from llmgw.config import load_agent_config

STRANGER = EngineUser(name="llmgw-engine", uid=2**31 - 2, gid=2**31 - 2, home="/var/lib/llmgw/engine-home")


def test_engines_listen_on_the_address_the_control_plane_is_reached_from_never_every_address():
    assert management_address(["https://127.0.0.1:7443"]) == "127.0.0.1"
    assert listen_address("", ["127.0.0.1:7443"]) == "127.0.0.1"
    assert listen_address("0.0.0.0", ["127.0.0.1:7443"]) == "127.0.0.1"
    assert listen_address("::", ["127.0.0.1:7443"]) == "127.0.0.1"
    assert listen_address("10.1.2.3", ["127.0.0.1:7443"]) == "10.1.2.3"
    assert listen_address("", ["https://no-such-host.invalid:7443"]) == "127.0.0.1"


def test_agent_yaml_refuses_engines_on_every_address(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("control_planes: [https://10.0.0.1:7443]\nengine_host: 0.0.0.0\n")
    with pytest.raises(Exception) as e:
        load_agent_config(str(path))
    assert "engine_host: 0.0.0.0 is every address of the node" in str(e.value)


def test_a_folder_closed_to_others_is_named(open_dir):
    closed = open_dir / "closed"
    (closed / "weights").mkdir(parents=True)
    (closed / "weights" / "m.gguf").write_bytes(b"GGUF")
    os.chmod(closed, 0o700)
    assert unreachable_part(closed / "weights" / "m.gguf", STRANGER) == closed
    os.chmod(closed, 0o711)
    assert unreachable_part(closed / "weights" / "m.gguf", STRANGER) is None
    os.chmod(closed / "weights" / "m.gguf", 0o600)
    assert unreachable_part(closed / "weights" / "m.gguf", STRANGER) == closed / "weights" / "m.gguf"


def test_a_start_whose_weights_the_engine_user_cannot_read_is_refused_in_words(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "m.gguf").write_bytes(b"GGUF")
    os.chmod(secret, 0o700)
    program = "/bin/true"
    with pytest.raises(EngineUserError) as e:
        runnable_argv([program], str(secret / "m.gguf"), STRANGER, tmp_path / "engines", "llamacpp")
    assert "engines run as llmgw-engine, who cannot reach its weights" in str(e.value)
    assert 'engine_user: "" in agent.yaml' in str(e.value)


def test_an_engine_runs_with_its_own_home_not_the_agents_folders():
    env = as_engine_user({"HOME": "/root", "XDG_CACHE_HOME": "/root/.cache", "SHIV_ROOT": "/root/.shiv",
                          "CUDA_VISIBLE_DEVICES": "0"}, STRANGER)
    assert env == {"HOME": "/var/lib/llmgw/engine-home", "USER": "llmgw-engine", "LOGNAME": "llmgw-engine",
                   "CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.skipif(os.geteuid() == 0, reason="an agent that is not root")
def test_an_agent_that_is_not_root_runs_engines_as_itself():
    from llmgw.agent.engine_user import engine_user

    assert engine_user().is_self and engine_user().uid == os.geteuid()


def test_the_python_running_llmgw_is_checked_for_the_sim_engine(tmp_path):
    blocked = unreachable_part(os.path.dirname(os.__file__), STRANGER)
    if blocked is None:
        assert runnable_argv([sys.executable, "-m", "llmgw"], "", STRANGER, tmp_path, "sim")[0] == sys.executable
    else:
        with pytest.raises(EngineUserError, match="who cannot reach the Python running llmgw"):
            runnable_argv([sys.executable, "-m", "llmgw"], "", STRANGER, tmp_path, "sim")
