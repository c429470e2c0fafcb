"""The server.yaml and agent.yaml `llmgw server init` writes: commented, every path under the layout."""

from __future__ import annotations

import json

import attrs

from llmgw.install.layout import Layout

__all__ = ["ServerFile", "server_yaml", "agent_yaml", "SIM_MODEL", "model_entry"]

SIM_MODEL = "llmgw-sim"


def _q(value: object) -> str:
    """A YAML scalar (JSON is YAML): quoted text that survives any path."""
    return json.dumps(value)


@attrs.frozen
class ServerFile:
    """What server.yaml says, as init chose it."""

    listen: str
    admin_listen: str
    admin_remote: bool
    agent_listen: str
    metrics_listen: str
    store_dsn: str  #: a SQLite path, or file:PATH holding a PostgreSQL address
    store_is_postgres: bool
    mirror_url: str = ""
    mirror_api: str = ""
    mirror_offline: bool = False  #: from an offline bundle (--bundle): nothing is fetched from outside
    trusted_keys: tuple[str, ...] = ()  #: release keys (base64) --trust named, kept as releases.trusted_keys
    model: str = "none"  #: none, sim, or a GGUF repository (org/repo) for llama.cpp on CPUs


def model_entry(model: str) -> list[str]:
    """The `models:` lines for init's first model; none for `none`."""
    if model in ("", "none"):
        return []
    if model == "sim":
        return [
            "  # A simulated model (llmgw sim-engine): answers like an OpenAI engine, on",
            "  # CPUs, without weights. Replace it with your own models.",
            f"  - name: {SIM_MODEL}",
            "    engine: sim",
            "    profiles:",
            "      - name: cpu",
            "    scaling: {min: 1, max: 1}",
        ]
    name = model.rsplit("/", 1)[-1].lower().removesuffix("-gguf")
    return [
        "  # The first model: a GGUF from the Hugging Face repository below, run by",
        "  # llama.cpp on CPUs. Add a gpus: profile for a node with GPUs.",
        f"  - name: {_q(name)}",
        f"    source: {_q(model)}",
        "    engine: llamacpp",
        "    profiles:",
        "      - name: cpu",
        "    scaling: {min: 1, max: 1}",
    ]


def server_yaml(layout: Layout, f: ServerFile, *, hostname: str) -> str:
    tls = layout.tls
    lines = [
        f"# server.yaml for the control plane on {hostname}, written by `llmgw server init`.",
        "# Yours to edit: init never writes over it. Every key: `llmgw docs reference`;",
        "# `llmgw config check THIS-FILE` says what is wrong before a restart",
        "# (systemctl restart llmgw-server).",
        "",
        "# The client API (OpenAI- and Anthropic-compatible): open to everyone.",
        f"listen: {_q(f.listen)}",
        "",
        "# The admin API (llmgw ctl, the console).",
    ]
    if f.admin_remote:
        lines += [
            "# Opened to the networks given with --admin-from: the firewall table",
            "# (/etc/nftables.d/llmgw.nft) closes it to everyone else.",
            f"admin_listen: {_q(f.admin_listen)}",
            "admin_remote: true",
        ]
    else:
        lines += [
            "# On loopback only; from elsewhere: ssh -L 9090:127.0.0.1:9090 this machine.",
            f"admin_listen: {_q(f.admin_listen)}",
        ]
    lines += [
        f"admin_token_file: {_q(str(layout.admin_token))}",
        "",
        "# Prometheus metrics; the firewall table keeps them on loopback unless",
        "# init was given --metrics-from.",
        f"metrics_listen: {_q(f.metrics_listen)}",
        "",
        "# Nodes' agents connect here with certificates from the cluster's own",
        f"# authority (its key: {layout.ca_dir}, readable by root only).",
        f"agent_listen: {_q(f.agent_listen)}",
        "agent_tls:",
        f"  cert: {_q(str(tls / 'server.pem'))}",
        f"  key: {_q(str(tls / 'server-key.pem'))}",
        f"  ca: {_q(str(tls / 'ca.pem'))}",
        "",
        "store:",
    ]
    if f.store_is_postgres:
        lines += [
            "  # PostgreSQL; the address (with its password) is kept in that file, 0600.",
            f"  dsn: {_q(f.store_dsn)}",
        ]
    else:
        lines += [
            "  # SQLite, for one control plane; several share a PostgreSQL (docs: install).",
            f"  dsn: {_q(f.store_dsn)}",
        ]
    lines += [
        "",
        "backup:",
        f"  dir: {_q(str(layout.state / 'backups'))}",
        "",
        "auth:",
        "  keys_required: true",
        "  signup_open: false",
        "",
    ]
    if f.mirror_url:
        lines += [
            "# Where nodes fetch model files from (llmgw mirror).",
            "mirror:",
            f"  url: {_q(f.mirror_url)}",
        ]
        if f.mirror_api:
            lines.append(f"  api: {_q(f.mirror_api)}")
        if f.mirror_offline:
            lines.append("  offline: true  # installed from an offline bundle: nothing is fetched from outside")
        lines.append("")
    else:
        lines += [
            "# No mirror: each node fetches weights from the model's source. One later:",
            "# mirror: {url: http://models.internal:8081, api: https://models.internal:8082}",
            "",
        ]
    if f.trusted_keys:
        lines += [
            "# Release keys this cluster trusts beside the built-in ones (llmgw release; docs: releases).",
            "releases:",
            "  trusted_keys:",
            *[f"    - {_q(key)}" for key in f.trusted_keys],
            "",
        ]
    entry = model_entry(f.model)
    if entry:
        lines += ["models:", *entry, ""]
    else:
        lines += [
            "# Models: add them here, or at run time with `llmgw ctl model add`.",
            "models: []",
            "",
        ]
    return "\n".join(lines)


def agent_yaml(layout: Layout, *, node_id: str, agent_address: str, engine_user: str | None = None) -> str:
    tls = layout.tls
    state = layout.state / "agent"
    return "\n".join([
        "# agent.yaml for this machine as a node of its own control plane,",
        "# written by `llmgw server init`. Every key: `llmgw docs reference`.",
        "",
        "# Must match the certificate's common name.",
        f"node_id: {_q(node_id)}",
        "",
        "# The control plane on this machine; add the others' agent addresses when",
        "# more control planes join.",
        f"control_planes: [{_q(agent_address)}]",
        "tls:",
        f"  cert: {_q(str(tls / 'node.pem'))}",
        f"  key: {_q(str(tls / 'node-key.pem'))}",
        f"  ca: {_q(str(tls / 'ca.pem'))}",
        "",
        f"state_dir: {_q(str(state))}",
        "# Weights are large: put this on a disk with room.",
        f"weights_dir: {_q(str(layout.state / 'weights'))}",
        f"engines_dir: {_q(str(layout.state / 'engines'))}",
        "",
        "# Engines answer this machine's router only; write 0.0.0.0 when control",
        "# planes on other machines should reach them too.",
        "engine_host: 127.0.0.1",
        *([] if engine_user is None else [
            "",
            "# The user engines run as (empty: root, as the agent).",
            f"engine_user: {_q(engine_user)}",
        ]),
        "",
    ])
