"""Agent <-> control plane: the messages (messages.py), their frames (codec.py) and the transport (channel.py).

See docs/agent-protocol.md.
"""

from llmgw.wire.codec import (
    UnknownMessageType,
    WireError,
    check_peer_protocol,
    decode,
    encode,
    from_dict,
    make_converter,
    to_dict,
)
from llmgw.wire.messages import *  # noqa: F403 (the message classes are the package's API)
from llmgw.wire.messages import __all__ as _messages_all

__all__ = [
    "UnknownMessageType",
    "WireError",
    "check_peer_protocol",
    "decode",
    "encode",
    "from_dict",
    "make_converter",
    "to_dict",
    *_messages_all,
]
