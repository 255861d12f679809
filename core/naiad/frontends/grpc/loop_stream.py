"""``ModelStreamInfer`` on the event loop, for naiad's own gRPC server (:mod:`.naiad_server`).

Why: run in the servicer's handler (:class:`.stream.Stream`), an open stream holds a thread
of the pool for its responses and a reader thread for its requests, and each request
crosses both: from the loop to the reader, and from whoever delivers its response back to
the handler's thread and then to the loop. On one core those wake-ups cost more than the
inference of a small model (perf_analyzer ``--streaming`` at 8 streams: about half of
tritonserver's rate, where unary calls on the loop were at par). Here a request is decoded
and submitted as its message arrives, and a response is encoded and sent as it is delivered
(on the loop, or handed to it by the thread that delivered it), with no thread of the
stream's own.

It is the same stream: :class:`LoopStream` extends :class:`.stream.Stream` and keeps its
answers, order, errors, cancellation and bounds (``--grpc-max-streams``,
``--grpc-stream-idle-timeout``, the buffered-response budget). A client that does not read
holds the stream's encoded answers in flow control up to
:data:`.sending.STREAM_SEND_BUFFER` bytes; responses after that wait unencoded and count
against the budget, as they wait on the handler's queue when a thread runs the stream.

The engine runs the streams a frontend process forwards (from naiad's gRPC server or
grpc's) with it too (``naiad.frontends.bridge.stream_engine``). :class:`LoopStreams`
starts every stream: it checks the header of a restricted ``ModelStreamInfer``
(``--grpc-restricted-protocol``) and ``--grpc-max-streams`` first, in the handler's order
and with its answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.grpc.status import bounded_message
from naiad.frontends.grpc.stream import (
    GRPC_ERROR_HEADER,
    IDLE_TIMEOUT_FLAG,
    Stream,
    _EndStream,
    _Entry,
)
from naiad.frontends.restrictions import grpc_requirements
from naiad.types import InferenceResponse

if TYPE_CHECKING:
    from naiad.frontends.grpc.service import InferenceServicer

_Item = tuple[_Entry, "InferenceResponse | None", bool]


class StreamConnection(Protocol):
    """What a :class:`LoopStream` answers through: naiad's gRPC connection
    (:class:`~naiad.frontends.grpc.connection.GRPCConnection`), or in the engine a frontend
    process's link (``naiad.frontends.bridge.stream_engine``). Called on ``loop``."""

    loop: asyncio.AbstractEventLoop

    def later(self, delay_s: float, callback: Callable[[], object]) -> None: ...

    def may_send(self, call: Any) -> bool:
        """Whether ``call``'s client takes more answers now (else: they wait, and
        :meth:`LoopStream.resume` is called when it may)."""

    def send_message(self, call: Any, message: bytes) -> None: ...

    def finish(self, call: Any, code: grpc.StatusCode, message: str) -> None: ...

    def end_now(self, call: Any, code: grpc.StatusCode, message: str) -> None: ...


class LoopStream(Stream):
    """One ``ModelStreamInfer`` call of ``connection`` answered on its event loop. The
    connection calls :meth:`on_message`, :meth:`on_client_end`, :meth:`resume` and, once
    the call is over whatever ended it, :meth:`call_over`. ``call`` is the connection's
    for the call: it has the call's ``metadata``, and it is what the connection's methods
    take."""

    def __init__(self, servicer: InferenceServicer, connection: StreamConnection, call: Any,
                 forwarded: dict[str, str] | None, parse: Callable[[bytes], Any]) -> None:
        super().__init__(servicer.server, servicer.encoder, forwarded,
                         idle_timeout_s=servicer.stream_settings.idle_timeout_s,
                         budget=servicer.response_budget, end_call=self._end_now)
        self.connection = connection
        self.call = call
        self.loop = connection.loop
        self.open_streams = servicer.open_streams
        self._loop_thread = threading.get_ident()
        self._parse = parse  # bytes -> ModelInferRequest, or UndecodableRequest (refused)
        self._over = False  # call_over ran
        self.waiting: deque[_Item] = deque()  # delivered while the client did not read
        self._drain_scheduled = False
        self.client_done = False  # the client sent END_STREAM
        self.last_message = self.loop.time()
        self.grpc_error = any(key == GRPC_ERROR_HEADER and str(value).lower() == "true"
                              for key, value in call.metadata)
        if self.idle_timeout_s:
            self.connection.later(self.idle_timeout_s, self._idle_check)

    # --- requests in ----------------------------------------------------------------------

    def on_message(self, message: bytes) -> None:
        """One request message of the stream (window accounting is the connection's)."""
        if self.closed:
            return
        self.last_message = self.loop.time()
        self.submitted += 1  # counted before any answer of it can come
        self._submit(self._parse(message))

    def on_client_end(self) -> None:
        self.client_done = True
        self._finish_if_over()

    # --- responses out --------------------------------------------------------------------

    def offer(self, entry: _Entry, response: InferenceResponse | None, final: bool) -> None:
        """A response (or refusal, or final flag) of ``entry``, from any thread: sent on the
        loop, at once when it is delivered there."""
        if self.closed:
            return
        if response is not None and self.buffer is not None and not self.buffer.add():
            return  # the stream was ended (by this response or before): drop it
        if threading.get_ident() == self._loop_thread:
            self._deliver(entry, response, final)
        else:
            self._on_loop(self._deliver, entry, response, final)

    def _on_loop(self, callback: Callable[..., object], *args: Any) -> None:
        """Run ``callback`` on the loop, from another thread (a model's sender must not
        fail because the server is stopping: then the loop is closed and nobody waits)."""
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass

    def _deliver(self, entry: _Entry, response: InferenceResponse | None, final: bool
                 ) -> None:
        if self.closed:
            return
        if self.waiting or not self.connection.may_send(self.call):
            self.waiting.append((entry, response, final))
            return
        self._send(entry, response, final)
        self._finish_if_over()

    def _send(self, entry: _Entry, response: InferenceResponse | None, final: bool) -> None:
        try:
            for message in self._answered(entry, response, final):
                self.connection.send_message(self.call, message)
        except _EndStream:  # triton_grpc_error: the call ends with the error's status
            self._end(*self.failure)  # type: ignore[misc]

    def resume(self) -> None:
        """The client read: the answers that waited go out (soon: not inside the sender)."""
        if self.waiting and not self._drain_scheduled and not self.closed:
            self._drain_scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        waiting = self.waiting
        while waiting and not self.closed and self.connection.may_send(self.call):
            self._send(*waiting.popleft())
        self._finish_if_over()

    # --- the call's end -------------------------------------------------------------------

    def _finish_if_over(self) -> None:
        """End the call OK once the client sent its last request and every request was
        answered."""
        if (self.client_done and self.finished == self.submitted and not self.waiting
                and not self.closed):
            self.over = self.closed = True
            self._release()
            self.connection.finish(self.call, grpc.StatusCode.OK, "")

    def _end(self, code: grpc.StatusCode, message: str) -> None:
        """End the call with a status after what it sent (idle, ``triton_grpc_error``)."""
        self.failure = (code, message)
        self._close()
        self.connection.finish(self.call, code, bounded_message(message))

    def _end_now(self, code: grpc.StatusCode, message: str) -> None:
        """End the call at once, dropping what flow control holds (a client that does not
        read still gets the status): the response budget's overflow, from any thread."""
        if threading.get_ident() == self._loop_thread:
            self.connection.end_now(self.call, code, message)
        else:
            self._on_loop(self.connection.end_now, self.call, code, message)

    def _close(self) -> None:
        """Nothing more for this stream: cancel its requests, drop what it holds (on the
        loop, which may be sending it: the budget's overflow comes from any thread)."""
        self.closed = True
        self._cancel_running()
        if threading.get_ident() == self._loop_thread:
            self._release()
        else:
            self._on_loop(self._release)

    def _release(self) -> None:
        self.waiting.clear()
        self.ordered.clear()

    def call_over(self) -> None:
        """The call is over, however it ended (answered, cancelled, past its deadline, the
        connection lost)."""
        if self._over:
            return
        self._over = True
        self.call_ended()
        self.open_streams.leave()

    def _idle_check(self) -> None:
        """``--grpc-stream-idle-timeout``: a stream with no request in flight that sent none
        for that long ends UNAVAILABLE (checked again later while it is not idle)."""
        if self.closed or self.client_done:
            return
        idle_s = self.idle_timeout_s
        if self.submitted == self.finished:
            left = self.last_message + idle_s - self.loop.time()
            if left <= 0:
                self._end(grpc.StatusCode.UNAVAILABLE, (
                    f"ModelStreamInfer: the stream sent no request for {idle_s:g} s "
                    f"with none in flight ({IDLE_TIMEOUT_FLAG}); open a new one"))
                return
            self.connection.later(left, self._idle_check)
        else:
            self.connection.later(idle_s, self._idle_check)


class LoopStreams:
    """Starts the ``ModelStreamInfer`` calls of naiad's own server on the loop."""

    def __init__(self, servicer: InferenceServicer, options: GRPCOptions,
                 handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.servicer = servicer
        # The handler's own parser: an undecodable request is refused in the stream alike.
        self.parse = handlers["ModelStreamInfer"].request_deserializer
        self.requirement = grpc_requirements(options.restricted).get("ModelStreamInfer")

    def start(self, connection: StreamConnection, call: Any) -> bool:
        """Start ``call``, or refuse it as its handler would: without the header of a
        restricted API, or beyond ``--grpc-max-streams``. Always True (it is taken)."""
        requirement = self.requirement
        if requirement is not None and not requirement.met_by(call.metadata):
            connection.finish(call, grpc.StatusCode.UNAVAILABLE, requirement.refusal)
            return True
        servicer = self.servicer
        if not servicer.open_streams.enter():
            connection.finish(call, grpc.StatusCode.RESOURCE_EXHAUSTED,
                              servicer.open_streams.refusal)
            return True
        forwarded: Any = (None if servicer.forwarder is None
                          else servicer.forwarder.from_grpc(call.metadata))
        stream = LoopStream(servicer, connection, call, forwarded, self.parse)
        call.stream = stream
        call.on_cancel = stream.call_ended
        return True


__all__ = ["LoopStream", "LoopStreams", "StreamConnection"]
