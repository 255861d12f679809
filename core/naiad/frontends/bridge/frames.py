"""The frames between a frontend process and the engine, on one Unix stream socket.

A frame is ``<u32 size of the rest> <u8 kind> <u32 exchange id> <body>``; an exchange is one
HTTP request and its answer, numbered by the frontend. Frontend -> engine:

- ``REQUEST``: ``<u32 scope size> <scope: JSON> <u8 more body>`` and the first body bytes;
- ``BODY``: ``<u8 more body>`` and the next body bytes;
- ``DISCONNECT``: the client went away (the application's ``receive`` says so).

Engine -> frontend:

- ``RESPONSE``: ``<u32 head size> <[status, headers]: JSON> <u8 more body>`` and the first
  body bytes (the application's ``http.response.start`` and first body message in one);
- ``BODY``: as above, the answer's next bytes;
- ``ABORT``: the application ended without finishing its answer: close the connection.

Headers travel as latin-1 strings (HTTP header bytes map one to one).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

import orjson

REQUEST, BODY, DISCONNECT, RESPONSE, ABORT = 1, 2, 3, 4, 5

_HEAD = struct.Struct("<IBI")  # size of the rest, kind, exchange id
_SIZE = struct.Struct("<I")
_MORE = struct.Struct("<B")
HEAD_SIZE = _HEAD.size
# The largest frame accepted: a frame announcing more is a broken peer, not a message. The
# engine's own limits (--max-input-size...) apply to what a frame carries.
MAX_FRAME_BYTES = 1 << 31

OnFrame = Callable[[int, int, memoryview], object]


def frame(kind: int, exchange: int, *parts: bytes | memoryview) -> bytes:
    body = b"".join(parts)
    return _HEAD.pack(len(body) + 5, kind, exchange) + body


def with_json(kind: int, exchange: int, document: Any, more: bool,
              data: bytes | memoryview) -> bytes:
    """A REQUEST or RESPONSE frame: a JSON document, the more-body flag, the first bytes."""
    head = orjson.dumps(document)
    return frame(kind, exchange, _SIZE.pack(len(head)), head, _MORE.pack(more), data)


def body_frame(exchange: int, more: bool, data: bytes | memoryview) -> bytes:
    return frame(BODY, exchange, _MORE.pack(more), data)


def read_json(body: memoryview) -> tuple[Any, bool, bytes]:
    """(document, more body, body bytes) of a REQUEST or RESPONSE frame's body."""
    (size,) = _SIZE.unpack_from(body, 0)
    document = orjson.loads(body[4:4 + size])
    return document, bool(body[4 + size]), bytes(body[5 + size:])


def read_body(body: memoryview) -> tuple[bool, bytes]:
    return bool(body[0]), bytes(body[1:])


class FrameProtocol(asyncio.Protocol):
    """Reads frames off a stream socket and hands each to ``on_frame(kind, exchange, body)``
    on the event loop; ``on_lost()`` once the connection ends."""

    def __init__(self, on_frame: OnFrame, on_lost: Callable[[], object]) -> None:
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._received = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        received = self._received
        received += data
        position, available = 0, len(received)
        view = memoryview(received)
        try:
            while available - position >= HEAD_SIZE:
                size, kind, exchange = _HEAD.unpack_from(received, position)
                if size > MAX_FRAME_BYTES or size < 5:
                    assert self.transport is not None
                    self.transport.close()  # a broken peer: nothing it sends can be trusted
                    return
                end = position + 4 + size
                if end > available:
                    break
                self.on_frame(kind, exchange, view[position + HEAD_SIZE:end])
                position = end
        finally:
            view.release()
        if position:
            del received[:position]

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()

    def write(self, data: bytes) -> bool:
        """Send a frame; False when the connection is gone."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(data)
        return True
