"""Reading a node's log through its agent: a RequestLogs out, LogChunks back.

The leader asks a connected agent for the last lines of its own log (an
empty shard id) or of one replica's engine log, under a fresh request id,
and gathers the LogChunks that carry that id until the one marked `last`.
`LogRequests` keeps the requests in flight: the agent's session hands it
every LogChunk (`take`), and a session that ends fails the requests sent on
it at once (`session_closed`) rather than leaving them to time out.

Every line is made plain (no terminal escapes) and scrubbed of what looks
like a key or a password before it is handed on: engines print their
command lines, and those hold keys.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Any

import attrs

from llmgw.obs.loglines import plain, scrub
from llmgw.wire.channel import ConnectionClosed
from llmgw.wire.messages import LogChunk, RequestLogs

__all__ = [
    "LOG_TIMEOUT",
    "LogRequests",
    "NodeLogError",
    "NodeNotAnswering",
    "NodeNotConnected",
    "UnknownNode",
    "valid_replica_id",
]

#: Seconds an agent has to send the whole log asked for.
LOG_TIMEOUT = 5.0
# What a replica id may be: what the agent accepts as a shard's file name (llmgw/agent/supervisor.py).
_REPLICA_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def valid_replica_id(replica: str) -> bool:
    return bool(_REPLICA_ID.fullmatch(replica))


class NodeLogError(Exception):
    """A node's log could not be read; the message says why, for the operator."""


class UnknownNode(NodeLogError, KeyError):
    """The leader knows no node of that id (or the replica is on another node)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NodeNotConnected(NodeLogError):
    """The node is known, but its agent is not connected to this control plane now."""


class NodeNotAnswering(NodeLogError):
    """The agent did not send the whole log in time."""


@attrs.define(eq=False)
class _Request:
    node_id: str
    session: Any
    lines: list[str] = attrs.Factory(list)
    done: asyncio.Future | None = None


class LogRequests:
    """Requests for logs in flight, by request id."""

    def __init__(self) -> None:
        self._pending: dict[str, _Request] = {}

    def __len__(self) -> int:
        return len(self._pending)

    async def ask(self, session: Any, *, shard_id: str = "", lines: int = 200,
                  timeout: float = LOG_TIMEOUT) -> list[str]:
        """The last `lines` lines from the agent of `session`, oldest first, scrubbed of secrets."""
        node_id = session.node_id
        request_id = f"logs-{secrets.token_hex(6)}"
        request = _Request(node_id=node_id, session=session, done=asyncio.get_running_loop().create_future())
        self._pending[request_id] = request
        what = f"replica {shard_id}'s log" if shard_id else "its agent's log"
        try:
            try:
                await session.send(RequestLogs(request_id=request_id, shard_id=shard_id, lines=lines))
            except ConnectionClosed as exc:
                raise NodeNotConnected(f"{node_id}'s agent went away before it was asked for {what}: {exc}") from None
            try:
                async with asyncio.timeout(timeout):
                    await request.done
            except TimeoutError:
                got = f"; {len(request.lines)} lines came, then nothing" if request.lines else ""
                raise NodeNotAnswering(f"{node_id} did not send {what} within {timeout:g}s{got}; its agent may be "
                                       "busy or its connection slow: try again") from None
        finally:
            self._pending.pop(request_id, None)
        return [scrub(plain(line)) for line in request.lines]

    def take(self, node_id: str, chunk: LogChunk) -> bool:
        """A LogChunk from `node_id`'s agent; False when no request of that node waits for it (a late one)."""
        request = self._pending.get(chunk.request_id)
        if request is None or request.node_id != node_id or request.done is None or request.done.done():
            return False
        request.lines.extend(chunk.lines)
        if chunk.last:
            request.done.set_result(None)
        return True

    def session_closed(self, session: Any, reason: str = "") -> None:
        """The agent's session ended: what was asked on it will not be answered."""
        for request in self._pending.values():
            if request.session is session and request.done is not None and not request.done.done():
                request.done.set_exception(NodeNotConnected(
                    f"{request.node_id}'s agent disconnected before it sent its log"
                    + (f" ({reason})" if reason else "")))
