"""Configuration of every role: server.yaml (control planes) and agent.yaml (nodes).

    from llmgw.config import load_server_config, ConfigError
    config = load_server_config("/etc/llmgw/server.yaml")
    config.router.timeouts.dial.total_seconds()

The classes are frozen attrs classes, one per section (server.py, agent.py);
load.py reads and checks files; reference.py writes docs/reference.md.
"""

from llmgw.config.agent import AgentConfig
from llmgw.config.errors import ConfigError, Problem
from llmgw.config.load import (
    dump_agent_config,
    dump_server_config,
    load_agent_config,
    load_server_config,
    make_converter,
    parse_agent_config,
    parse_server_config,
)
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig
from llmgw.config.units import ByteSize, Duration

__all__ = [
    "AgentConfig",
    "ByteSize",
    "ConfigError",
    "Duration",
    "Problem",
    "Secret",
    "ServerConfig",
    "dump_agent_config",
    "dump_server_config",
    "load_agent_config",
    "load_server_config",
    "make_converter",
    "parse_agent_config",
    "parse_server_config",
]
