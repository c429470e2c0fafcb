"""Example files printed by `llmgw config example`: commented, and passing `config check`."""

from __future__ import annotations

__all__ = ["SERVER_EXAMPLE", "AGENT_EXAMPLE"]

SERVER_EXAMPLE = """\
# server.yaml: a control plane. Every key: docs/reference.md.
# A key left out has its default; `llmgw config check server.yaml` says what
# is wrong before the server is started with it.
#
# Durations are written 250ms, 5s, 30m, 1h30m or 2160h; sizes 128MiB, 1GiB
# or a number of bytes. A secret may be the value itself, env:NAME or
# file:/path.

# The client API: OpenAI- and Anthropic-compatible.
listen: ":8080"

# The admin API (llmgw ctl, the console) stays on loopback: reach it from
# elsewhere through `ssh -L 9090:127.0.0.1:9090`.
admin_listen: "127.0.0.1:9090"
metrics_listen: ":9091"

# Node agents connect here, with certificates from llmgw's own authority.
agent_listen: ":7443"
agent_tls:
  cert: /etc/llmgw/tls/server.pem
  key: /etc/llmgw/tls/server-key.pem
  ca: /etc/llmgw/tls/ca.pem

store:
  # One control plane: a SQLite file. Several: PostgreSQL, with the address
  # kept out of this file, e.g. dsn: file:/etc/llmgw/store/dsn
  dsn: /var/lib/llmgw/llmgw.db

auth:
  keys_required: true
  signup_open: false
  max_key_ttl: 2160h         # 90 days

router:
  max_body_bytes: 32MiB
  timeouts:
    dial: 5s
    first_byte: 2m           # long prompts take a while to read
    idle: 1m
    total: 30m
  # Proxies in front of llmgw whose X-Forwarded-For is believed.
  # trusted_proxies: [10.0.0.0/24]

accounting:
  # How long the record of each request is kept; sums for charts and
  # budgets are kept anyway. 0 keeps every record.
  usage_retention: 2160h

# mirror:
#   url: http://models.internal:8081
#   api: https://models.internal:8082

# notify:
#   sinks:
#     - url: https://hooks.example.com/llmgw
#       secret: env:LLMGW_WEBHOOK_SECRET
#       events: [model_parked, node_lost]

prices:
  currency: USD
  default: {input: 0.10, output: 0.40}   # per million tokens

models:
  # A small model on CPUs, always running.
  - name: qwen3-0.6b
    aliases: [small]
    source: Qwen/Qwen3-0.6B-GGUF
    engine: llamacpp
    class: critical
    scaling: {min: 1, max: 2}
    profiles:
      - name: cpu
        cores: 8
        memory: 4GiB

  # A larger model on one GPU, started by the first request and stopped
  # after half an hour without one.
  - name: qwen3-32b
    source: Qwen/Qwen3-32B
    fallbacks: [qwen3-0.6b]
    class: opportunistic
    scaling: {min: 0, max: 2, on_demand: true, idle_timeout: 30m}
    price: {input: 0.50, output: 2.00}
    profiles:
      - name: h100
        engine: vllm
        gpus: 1
        gpu_class: h100-80g
        args: [--max-model-len, "32768"]

  # A model served by a provider outside the cluster.
  # - name: gpt-4o
  #   endpoints:
  #     - url: https://api.openai.com/v1
  #       api_key: env:OPENAI_API_KEY
"""

AGENT_EXAMPLE = """\
# agent.yaml: a node. Every key: docs/reference.md.
# `llmgw config check --agent agent.yaml` says what is wrong before the
# agent is started with it.

# Empty uses the host name; it must match the certificate's common name.
node_id: gpu01

# Every control plane's agent port; the agent dials the next when one goes.
control_planes:
  - https://10.0.0.140:7443
  - https://10.0.0.150:7443

# This node's certificate, from the cluster's authority.
tls:
  cert: /etc/llmgw/tls/node.pem
  key: /etc/llmgw/tls/node-key.pem
  ca: /etc/llmgw/tls/ca.pem

# Weights are large: put them on a disk with room.
weights_dir: /var/lib/llmgw/weights

# Matched by profiles' node_selector.
labels:
  llmgw.io/rack: r12-07
  llmgw.io/row: "12"

heartbeat_interval: 5s
"""
