"""What one connection of naiad's gRPC server sends (:mod:`.connection`): frames queued in
a round of the event loop go in one write; DATA waits for the client's windows (RFC 9113
section 5.2: the connection's and each call's), and a call's trailers wait behind its data.
Header frames are not flow-controlled.

A stream's handler thread waits (``Call.writable``) while :data:`STREAM_SEND_BUFFER` bytes
of its answers wait for the client, or while the transport's own buffer is full; a stream
run on the loop (``Call.stream``) holds its answers back then, and is told to look again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call

#: A stream's handler thread waits while this much of its output waits for the client.
STREAM_SEND_BUFFER = 1024 * 1024


class Sender:
    """The outgoing side of one connection: its write buffer, the client's windows and
    settings (frame size, header table size)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closing = False  # nothing more is written
        self.out: list[bytes] = []
        self.flush_scheduled = False
        self.paused = False  # the transport's buffer is full
        self.window = http2.DEFAULT_WINDOW  # the connection's, as the client gives it
        self.initial_window = http2.DEFAULT_WINDOW  # each new call's
        self.max_frame = http2.DEFAULT_FRAME_SIZE
        self.table_size: int | None = None  # a lowered SETTINGS_HEADER_TABLE_SIZE, to say
        # The calls with data in ``pending``: what a window update may let go (the others
        # have nothing to send, however many calls are open).
        self.held_back: set[Call] = set()

    def write(self, data: bytes) -> None:
        """Queue ``data``; what is queued in one round of the loop goes in one write."""
        self.out.append(data)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        out, self.out = self.out, []
        if self.transport is not None and not self.closing and out:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    def apply_settings(self, settings: Iterable[tuple[int, int]], calls: Iterable[Call]
                       ) -> None:
        """The client's SETTINGS: a new initial window changes every open call's window
        by the difference (section 6.9.2). ValueError for a window too large."""
        for key, value in settings:
            if key == http2.INITIAL_WINDOW_SIZE:
                if value > http2.MAX_WINDOW:
                    raise ValueError("window too large")
                change = value - self.initial_window
                self.initial_window = value
                for call in calls:
                    call.send_window += change
            elif key == http2.MAX_FRAME_SIZE:
                self.max_frame = value
            elif key == http2.HEADER_TABLE_SIZE and value < 4096:
                self.table_size = value

    def table_update(self) -> bytes:
        """What the next header block starts with: the size of the client's table naiad
        may use, once after the client lowered it (naiad never adds to it)."""
        if self.table_size is None:
            return b""
        update, self.table_size = http2.table_size_update(self.table_size), None
        return update

    def headers(self, call: Call, block: bytes, flags: int = http2.END_HEADERS) -> None:
        """A header block for ``call``, at once."""
        self.write(http2.frame(http2.HEADERS, flags, call.id, self.table_update() + block))

    def data(self, call: Call, data: bytes, flags: int) -> None:
        """DATA (or, ``flags`` with END_HEADERS, the trailers) for ``call``, as the
        windows allow; the rest waits in ``call.pending``."""
        if call.pending:
            call.pending.append((data, flags))
            self.held_back.add(call)
            return
        if flags & http2.END_HEADERS:
            self.write(http2.frame(http2.HEADERS, flags, call.id, data))
            return
        size = len(data)
        if size <= self.window and size <= call.send_window and size <= self.max_frame:
            self.window -= size
            call.send_window -= size
            self.write(http2.frame(http2.DATA, flags, call.id, data))
            return
        call.pending.append((data, flags))
        self.held_back.add(call)
        self.pending([call])

    def pending(self, calls: Iterable[Call]) -> list[Call]:
        """Send what flow control held back of ``calls``, as far as the windows now allow;
        the closed calls that have nothing left to send (they are over)."""
        over = []
        for call in calls:
            pending = call.pending
            while pending:
                data, flags = pending[0]
                if flags & http2.END_HEADERS:
                    pending.popleft()
                    self.write(http2.frame(http2.HEADERS, flags, call.id, data))
                    continue
                window = min(self.window, call.send_window, self.max_frame)
                if window <= 0:
                    break
                chunk = data[:window]
                last = len(chunk) == len(data)
                self.window -= len(chunk)
                call.send_window -= len(chunk)
                self.write(http2.frame(http2.DATA, flags if last else 0, call.id, chunk))
                if last:
                    pending.popleft()
                else:
                    pending[0] = (data[window:], flags)
            if call.writable is not None:
                waiting = sum(len(data) for data, _ in pending)
                if waiting < STREAM_SEND_BUFFER and not self.paused:
                    call.writable.set()
                else:
                    call.writable.clear()
            elif call.stream is not None and not self.paused:
                call.stream.resume()  # it looks whether it may send, and sends later
            if not pending:
                self.held_back.discard(call)
                if call.closed:
                    over.append(call)
        return over


__all__ = ["STREAM_SEND_BUFFER", "Sender"]
