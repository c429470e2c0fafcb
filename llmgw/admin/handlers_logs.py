"""Handler of a node's log: the last lines of its agent's log, or of one replica's engine log, each with its level.

The control plane asks the node's agent (llmgw/control/node_logs.py); this
checks what was asked, and says for each line how severe it is
(llmgw/obs/loglines.py), so every client colours the same lines alike.
"""

from __future__ import annotations

from llmgw.admin.cluster_types import LogLine, NodeLog
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.control.node_logs import valid_replica_id
from llmgw.obs.loglines import line_levels

__all__ = ["MAX_LOG_LINES", "get_node_logs"]

#: The most lines one read returns.
MAX_LOG_LINES = 5000


async def get_node_logs(call: Call) -> NodeLog:
    """The last lines of the node's agent log, oldest first, or with `replica` of that replica's engine
    log on the node; each line with its level (error, warning, info, debug, or empty when the line does
    not say). Anything that looks like a key or a password is masked. The leader asks the node's agent
    and waits up to 5 seconds: 404 for a node it does not know, 409 when the node's agent is not
    connected, 504 when it does not answer in time, 503 on a standby (naming the leader)."""
    node_id = call.params["node"]
    q = call.query
    if not 1 <= q.lines <= MAX_LOG_LINES:
        raise ApiError(400, f"lines: between 1 and {MAX_LOG_LINES}, got {q.lines}")
    if q.replica and not valid_replica_id(q.replica):
        raise ApiError(400, f"replica: {q.replica!r} is not a replica id; `llmgw ctl replicas` lists them")
    texts = await call.admin.need_cluster().node_logs(node_id, replica=q.replica, lines=q.lines)
    texts = texts[-q.lines:]
    return NodeLog(node=node_id, replica=q.replica,
                   lines=[LogLine(text=text, level=level) for text, level in zip(texts, line_levels(texts))])
