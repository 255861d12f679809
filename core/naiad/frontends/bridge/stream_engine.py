"""The engine's end of the ``ModelStreamInfer`` calls that the gRPC server in a frontend
process (naiad's or grpc's) forwards on its HTTP link (``frames.GRPC_STREAM``): each is
answered on the engine's event loop by the same
:class:`~naiad.frontends.grpc.loop_stream.LoopStream` a single-process server runs, with a
:class:`ForwardedStreamCall` in place of the HTTP/2 connection and call.

Why: run on threads (:mod:`.grpc_engine`), a forwarded stream crossed a reader thread and a
handler thread in the engine, and a pump thread and a handler thread in the frontend, for
every request: perf_analyzer ``--streaming`` at 8 streams got less than half the rate of a
single-process server on the same core (benchmarks/results).

Flow control: the engine keeps at most :data:`~.frames.ANSWER_WINDOW_BYTES` of a stream's
responses sent to the frontend and not yet reported ``SENT`` (taken by the client's
connection); past that, responses wait in the stream, counted against its budget, as they
wait for a client that does not read in a single-process server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from naiad.frontends.bridge import frames
from naiad.frontends.grpc.status import bounded_message


class ForwardedStreamCall:
    """One forwarded stream in the engine: the connection and the call its ``LoopStream``
    answers through (:class:`~naiad.frontends.grpc.loop_stream.StreamConnection`), writing
    frames with ``write``; ``streams`` holds it, by exchange, while it is open."""

    def __init__(self, exchange: int, metadata: tuple[tuple[str, Any], ...],
                 write: Callable[[bytes], object], streams: dict[int, ForwardedStreamCall],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.exchange = exchange
        self.metadata = metadata
        self.loop = loop
        self._write = write
        self._streams = streams
        self.stream: Any = None  # its LoopStream (set by LoopStreams.start)
        self.on_cancel: Callable[[], object] | None = None  # set by LoopStreams.start
        self.in_flight = 0  # response bytes written, not yet SENT back by the frontend
        self.ended = False
        # The stream's idle check (the only timer a LoopStream arms, one at a time).
        self._timer: asyncio.TimerHandle | None = None
        streams[exchange] = self

    # --- the frontend's frames ----------------------------------------------------------

    def on_frame(self, kind: int, body: memoryview) -> None:
        stream = self.stream
        if stream is None:
            return  # refused as it opened: what the frontend sent meanwhile is dropped
        if kind == frames.MESSAGE:
            stream.on_message(bytes(body[1:]))
        elif kind == frames.SENT:
            self.in_flight = max(0, self.in_flight - frames.read_sent(body))
            stream.resume()
        elif kind == frames.HALF_CLOSE:
            stream.on_client_end()
        elif kind == frames.DISCONNECT:  # the call ended on the client's side
            self.lost()

    def lost(self) -> None:
        """The call ended without the engine (the client went away, or the frontend)."""
        self.ended = True
        if self.on_cancel is not None:
            self.on_cancel()
        self._over()

    # --- what the stream calls (LoopStream's connection) ----------------------------------

    def later(self, delay_s: float, callback: Callable[[], object]) -> None:
        self._timer = self.loop.call_later(delay_s, callback)

    def may_send(self, call: ForwardedStreamCall) -> bool:
        return self.in_flight < frames.ANSWER_WINDOW_BYTES

    def send_message(self, call: ForwardedStreamCall, message: bytes,
                     uncompressed: bool = False) -> None:
        if self.ended:
            return
        self.in_flight += len(message)
        self._write(frames.message_frame(self.exchange, message, uncompressed))

    def finish(self, call: ForwardedStreamCall, code: grpc.StatusCode, message: str) -> None:
        self._end(code, message, now=False)

    def end_now(self, call: ForwardedStreamCall, code: grpc.StatusCode, message: str) -> None:
        self._end(code, bounded_message(message), now=True)

    def _end(self, code: grpc.StatusCode, message: str, now: bool) -> None:
        if self.ended:
            return
        self.ended = True
        self._write(frames.stream_end_frame(self.exchange, code.value[0], message, now))
        self._over()

    def _over(self) -> None:
        if self._streams.pop(self.exchange, None) is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        if self.stream is not None:
            self.stream.call_over()


__all__ = ["ForwardedStreamCall"]
