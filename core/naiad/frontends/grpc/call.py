"""One gRPC call on a connection of naiad's server (an HTTP/2 stream): what the connection
(:mod:`.connection`) and what it sends (:mod:`.sending`) know of it."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from typing import Any

from naiad.frontends.grpc.calls import CallContext


class Call:
    """One call (an HTTP/2 stream) from its headers to its status."""

    __slots__ = ("accept", "closed", "compressed", "context", "data", "deadline", "ended",
                 "headers_sent", "held", "id", "messages", "metadata", "method", "on_cancel",
                 "pending", "send_window", "started", "stream", "unread", "writable")

    def __init__(self, stream_id: int, method: str, metadata: tuple, send_window: int
                 ) -> None:
        self.id = stream_id
        self.method = method
        self.metadata = metadata
        self.data = bytearray()  # received, not yet taken as messages
        self.ended = False  # the client sent END_STREAM
        self.closed = False  # naiad sent the status, or the call was cancelled
        self.headers_sent = False
        self.send_window = send_window
        self.pending: deque[tuple[bytes, int]] = deque()  # (payload, flags) held by flow control
        self.compressed: bytes | None = None  # the request's grpc-encoding
        self.accept = b""  # the client's grpc-accept-encoding
        self.context: CallContext | None = None  # for calls run in the handlers
        self.messages: queue.SimpleQueue[Any] | None = None  # a stream's, for its handler
        # A stream's bytes queued for its handler, not yet taken; a unary call's received
        # and not yet given back as window.
        self.unread = 0
        # Connection window this call's data holds: received, not yet handed on.
        self.held = 0
        self.writable: threading.Event | None = None  # a stream's: set while it may send
        self.on_cancel: Any = None  # a fast-path call's cancellation
        self.stream: Any = None  # a ModelStreamInfer run on the loop (.loop_stream)
        self.deadline: asyncio.TimerHandle | None = None
        self.started = 0.0
