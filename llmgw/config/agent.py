"""agent.yaml: what a node's agent reads when it starts.

It holds what one machine needs to find its control planes and prove who it
is, and where it keeps its files. Everything else reaches the agent from the
control plane.
"""

import attrs

from llmgw.config.fields import section, setting
from llmgw.config.server import ReleasesConfig  # agent.yaml's releases: the same keys as server.yaml's
from llmgw.config.units import ByteSize, Duration

__all__ = ["AgentConfig", "NodeTLS"]


@attrs.frozen
class NodeTLS:
    """This node's certificate files, from llmgw's own authority, as PEM paths."""

    cert: str = setting(
        "/etc/llmgw/tls/node.pem", doc="This node's certificate; its common name is the node's id."
    )
    key: str = setting(
        "/etc/llmgw/tls/node-key.pem", doc="The private key of that certificate, readable by llmgw only."
    )
    ca: str = setting(
        "/etc/llmgw/tls/ca.pem",
        doc="The cluster's authority certificate; a control plane's certificate must be signed by it.",
    )


@attrs.frozen
class AgentConfig:
    """agent.yaml: one node's identity, its control planes and its directories."""

    node_id: str = setting(
        "",
        doc="This node's name in the cluster; must match its certificate's common name; empty uses the host name.",
    )
    control_planes: list[str] = setting(
        factory=list,
        doc="Every control plane's agent address, like https://10.0.0.140:7443; the agent dials the next when one goes.",
    )
    tls: NodeTLS = section(
        NodeTLS,
        doc="This node's certificate from the cluster's authority, and the authority the control planes' must come from.",
    )
    insecure: bool = setting(
        False,
        doc="Dial control planes without TLS; only for a control plane started with agent_insecure, on one machine or a test.",
    )
    state_dir: str = setting("/var/lib/llmgw", doc="Where the agent keeps what must survive a restart.")
    weights_dir: str = setting(
        "/var/lib/llmgw/weights", doc="Where model weights are downloaded to; give it a disk with room."
    )
    engines_dir: str = setting("/var/lib/llmgw/engines", doc="Where inference engines are installed.")
    engine_index_url: str = setting(
        "",
        doc="The Python package index engines are installed from (vLLM, SGLang, TensorRT-LLM, llama.cpp's source), "
            "like http://mirror.internal:8081/simple; empty uses PyPI.",
    )
    engine_pip_args: list[str] = setting(
        factory=list,
        doc="More arguments for pip when installing an engine, like --extra-index-url URL or --trusted-host HOST.",
    )
    labels: dict[str, str] = setting(
        factory=dict,
        doc="Labels placement matches against profiles' node_selector, like llmgw.io/rack: r12-07.",
    )
    mirror: str = setting(
        "",
        doc="The mirror's file server, like http://models.internal:8081; empty uses the one the control plane names.",
    )
    heartbeat_interval: Duration = setting(
        Duration(seconds=5), doc="How often the agent reports load and sensors to the control plane."
    )
    log_ring_size: int = setting(2000, doc="Lines of each engine's output kept in memory for llmgw ctl logs.")
    engine_host: str = setting(
        "",
        doc="The one address engines listen on; empty is the address this node reaches its first control plane "
            "from (127.0.0.1 when that is on this machine). Every address (0.0.0.0, ::) is refused.",
    )
    engine_user: str = setting(
        "llmgw-engine",
        doc="The user engines run as when the agent runs as root (made with useradd --system when missing); "
            "empty runs them as root, as the agent. An agent that is not root runs them as itself.",
    )
    engine_ports: str = setting(
        "20000-20999", doc="The ports engines listen on, one per shard, as FIRST-LAST."
    )
    engine_start_timeout: Duration = setting(
        Duration(minutes=15),
        doc="How long an engine may take from its start to answering its readiness check before its start fails.",
    )
    metrics_listen: str = setting(
        "", doc="Where this node's own Prometheus metrics are served (GET /metrics), like :9101; empty serves none "
                "(the leading control plane's /metrics has every node's)."
    )
    gpu_degraded_temperature_c: float = setting(
        87.0,
        doc="A card at or above this temperature (°C) is reported degraded and placement keeps it out, saying so; "
            "most data-centre cards start slowing themselves down in the high 80s.",
    )
    gpu_foreign_memory_limit: ByteSize = setting(
        ByteSize(2 * 1024**3),
        doc="Memory that processes other than this node's engines may hold on a card, like 2GiB, before the agent "
            "reports it degraded and placement keeps it out; 0 keeps out a card where anything else holds memory.",
    )
    releases: ReleasesConfig = section(
        ReleasesConfig,
        doc="The keys a release must be signed by before `llmgw ctl upgrade` may put it on this node (docs/upgrades.md); "
            "the keys built into llmgw are trusted too.",
    )
