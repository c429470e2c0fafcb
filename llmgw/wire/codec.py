"""Messages to msgpack frames and back.

A frame is one msgpack map: the message's fields plus `type`, its tag.
Decoding ignores fields it does not know (a newer peer's) and fills in
defaults for fields it misses (an older peer's); a tag it does not know is
an `UnknownMessageType`, which a receiver may skip.
"""

from __future__ import annotations

from typing import Any, Iterable

import cattrs
import msgpack
from cattrs.strategies import configure_tagged_union

from llmgw.wire.messages import ALL_MESSAGES, OLDEST_PROTOCOL, PROTOCOL_VERSION, Message

__all__ = [
    "WireError",
    "UnknownMessageType",
    "make_converter",
    "encode",
    "decode",
    "to_dict",
    "from_dict",
    "check_peer_protocol",
]

TAG = "type"
_BY_TAG: dict[str, type] = {cls.type: cls for cls in ALL_MESSAGES}


class WireError(Exception):
    """A frame that is not a message this side understands, or a connection that broke."""


class UnknownMessageType(WireError):
    """A well-formed frame whose `type` this side does not know: usually a newer peer's message."""

    def __init__(self, tag: Any) -> None:
        self.tag = tag
        super().__init__(
            f"unknown message type {tag!r}: this side speaks protocol {PROTOCOL_VERSION} "
            f"({', '.join(sorted(_BY_TAG))}); the peer is likely newer"
        )


def make_converter() -> cattrs.Converter:
    """The converter for wire messages: extra keys ignored, the union tagged by `type`."""
    conv = cattrs.Converter(forbid_extra_keys=False)
    configure_tagged_union(Message, conv, tag_generator=lambda cls: cls.type, tag_name=TAG)
    return conv


_converter = make_converter()


def to_dict(msg: Any) -> dict[str, Any]:
    """The message as plain data with its `type`, as it goes on the wire."""
    if type(msg) not in _BY_TAG.values():
        raise WireError(f"{type(msg).__name__} is not a wire message")
    data = _converter.unstructure(msg, unstructure_as=Message)
    return {TAG: msg.type, **{k: v for k, v in data.items() if k != TAG}}


def from_dict(data: Any, *, expect: Iterable[type] | None = None) -> Any:
    """Structure plain data into its message; `expect` limits which types are taken."""
    if not isinstance(data, dict):
        raise WireError(f"a frame must be a map with a {TAG!r}, got {type(data).__name__}")
    tag = data.get(TAG)
    if tag is None:
        raise WireError(f"a frame has no {TAG!r}: keys {sorted(map(str, data))[:8]}")
    cls = _BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise UnknownMessageType(tag)
    if expect is not None and cls not in tuple(expect):
        raise WireError(f"{tag!r} is not a message this side takes from its peer (sent the wrong way?)")
    try:
        return _converter.structure(data, cls)
    except Exception as exc:  # cattrs' validation errors, or a converter's TypeError/ValueError
        raise WireError(f"malformed {tag!r}: {_explain(exc, tag)}") from exc


def encode(msg: Any) -> bytes:
    """One message as one msgpack frame."""
    return msgpack.packb(to_dict(msg), use_bin_type=True)


def decode(frame: bytes, *, expect: Iterable[type] | None = None) -> Any:
    """One msgpack frame as its message; `WireError` says what was wrong."""
    try:
        data = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # ExtraData, FormatError, StackError, ValueError, UnicodeDecodeError
        raise WireError(f"not a msgpack frame ({type(exc).__name__}: {exc})") from None
    return from_dict(data, expect=expect)


def check_peer_protocol(peer: int) -> str | None:
    """Why a peer speaking `peer` cannot be talked to, or None when it can.

    A peer older than OLDEST_PROTOCOL is refused. A newer peer is accepted:
    it knows this side's version from Register or Welcome and speaks down
    to it, or refuses.
    """
    if not isinstance(peer, int) or peer < OLDEST_PROTOCOL:
        return (
            f"the peer speaks protocol {peer}, older than the oldest this side speaks "
            f"({OLDEST_PROTOCOL}); upgrade it"
        )
    return None


def _explain(exc: Exception, tag: str) -> str:
    if isinstance(exc, (cattrs.ClassValidationError, cattrs.IterableValidationError)):
        return "; ".join(cattrs.transform_error(exc, path=tag))
    return f"{type(exc).__name__}: {exc}"
