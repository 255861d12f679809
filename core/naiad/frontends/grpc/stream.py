"""``ModelStreamInfer``: one bidirectional stream, any number of requests in flight on it.

In grpc's method handler (``--grpc-server=grpcio``, frontend processes, a restricted stream)
a reader thread takes requests off the stream and hands each to
:meth:`InferenceServer.stream`; the handler's generator (:meth:`Stream.responses`) sends
what comes back. naiad's own gRPC server runs the same stream on its event loop instead
(:mod:`.loop_stream`). As tritonserver 2.51 does (tests/compat/TRITON_OBSERVED.md, "Streaming"):

- every response a decoupled model sends is a ``ModelStreamInferResponse`` as soon as it
  comes, whatever the order of the requests, with ``triton_final_response`` false, and true
  on the last one. The final flag alone is sent (as an empty response: model name, request
  id, ``triton_final_response`` true) only when the request set the bool parameter
  ``triton_enable_empty_final_response``, which the model never sees;
- the answer to an ordinary model's request carries ``triton_final_response`` true, and
  answers of ordinary models (and refusals) go out in request order;
- an error puts its message in ``error_message`` and the stream goes on: a request refused
  before it ran gets only its id in ``infer_response``, an error the model's inference
  produced also gets the model name and ``triton_final_response``; but when the call's
  metadata holds ``triton_grpc_error: true``, the first error (refusal or inference error)
  ends the whole call with that error's gRPC status, its other requests cancelled.

Each request gets a :class:`~naiad.types.Cancellation`: when the call ends before its
requests did (the client cancelled, the deadline passed, the connection broke), those
still running are cancelled, so a model that looks (``request.is_cancelled()``) can stop,
and queued ones never run.

What one stream may hold, each a named setting (:class:`StreamSettings`):

- the server's thread pool gives each open stream a thread (grpc's synchronous server;
  :mod:`.listener` says why), so open streams are counted: beyond ``--grpc-max-streams``
  a new one is refused RESOURCE_EXHAUSTED naming the flag (:class:`OpenStreams`), and the
  pool keeps threads for every other call beyond those streams;
- with ``--grpc-stream-idle-timeout``, a stream with no request in flight that sent none
  for that long is ended UNAVAILABLE (tritonserver, whose streams cost no thread, has no
  such limit: off by default);
- responses waiting for a client that does not read are counted
  (:mod:`naiad.frontends.stream_buffer`): beyond the bound the stream is ended
  RESOURCE_EXHAUSTED naming the flag, its requests cancelled and its buffered responses
  dropped at once. Whenever the call ends, what the stream still held (queued responses,
  requests) is released then, not left in a reference cycle for the garbage collector.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from naiad.classification import classify_response
from naiad.errors import InferenceServerError, grpc_status, invalid_arg
from naiad.frontends.grpc.codec import (
    FINAL,
    NOT_FINAL,
    ResponseEncoder,
    ShmTargets,
    UndecodableRequest,
    decode_request,
    stream_empty_final,
    stream_error,
    stream_response,
)
from naiad.frontends.grpc.status import bounded_message
from naiad.frontends.stream_buffer import ResponseBudget
from naiad.types import Cancellation, InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.server import InferenceServer

log = logging.getLogger("naiad.grpc")

EMPTY_FINAL_PARAMETER = "triton_enable_empty_final_response"
# What goes on the stream's queue besides (entry, response, final) triples.
_READER_DONE = object()  # the client sent its last request (or the call broke)
_CALL_ENDED = object()  # the call ended before its requests did: stop sending

#: The stream header that makes the first error end the whole call with its status.
GRPC_ERROR_HEADER = "triton_grpc_error"


class _EndStream(Exception):
    """Raised by :meth:`Stream._encode` when an error ends a ``triton_grpc_error`` stream."""


#: The default of --grpc-max-streams (streams).
DEFAULT_MAX_STREAMS = 1024
MAX_STREAMS_FLAG = "--grpc-max-streams"
IDLE_TIMEOUT_FLAG = "--grpc-stream-idle-timeout"
#: How a call is ended from outside its handler: (status code, message).
EndCall = Callable[[grpc.StatusCode, str], None]


@dataclass(frozen=True)
class StreamSettings:
    """The bounds of ``ModelStreamInfer`` calls: ``max_streams`` open at once (0: no
    bound), and ``idle_timeout_s``, how long a stream with nothing in flight may send
    nothing (0: for ever)."""

    max_streams: int = DEFAULT_MAX_STREAMS
    idle_timeout_s: float = 0.0


class OpenStreams:
    """The count of open ``ModelStreamInfer`` calls against ``--grpc-max-streams``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        """Count a new stream; False (and not counted) when ``limit`` are open."""
        with self._lock:
            if self.limit and self.open >= self.limit:
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.open -= 1

    @property
    def refusal(self) -> str:
        return (f"ModelStreamInfer: {self.limit} streams are open, the most "
                f"{MAX_STREAMS_FLAG}={self.limit} allows; close one or try again later")


def call_ender(context: grpc.ServicerContext) -> EndCall:
    """How to end ``context``'s call from any thread with a status and message.

    A handler ends its call by raising (``context.abort``); one blocked sending to a
    client that does not read cannot. grpc core's call can be cancelled with a status,
    which it sends to the client at once (the trailers are not held back by flow control);
    grpc's Python API has only ``context.cancel()`` (CANCELLED, no message), used when its
    call object is not there (the frontend processes' forwarded calls). naiad's own server
    sends the status at once the same way (``CallContext.end_with``)."""

    def end(code: grpc.StatusCode, message: str) -> None:
        end_with = getattr(context, "end_with", None)  # naiad's server (calls.CallContext)
        if end_with is not None and end_with(code, bounded_message(message)):
            return
        call = getattr(getattr(context, "_rpc_event", None), "call", None)
        if call is not None:
            try:
                call.cancel(code.value[0], bounded_message(message))
                return
            except Exception:  # another grpc: fall back on the public API
                log.debug("cancelling a gRPC call with a status failed", exc_info=True)
        context.cancel()

    return end


class _Entry:
    """One request of the stream and what is known of it so far."""

    __slots__ = ("answer", "cancellation", "decoupled", "empty_final", "model",
                 "model_name", "refusal", "refusal_status", "request", "request_id", "stream",
                 "to_shm")

    def __init__(self, message: Any, stream: Stream) -> None:
        self.model_name: str = message.model_name
        self.request_id: str = message.id
        self.stream = stream
        self.request: InferenceRequest | None = None
        self.model: Any = None  # the ModelVersion it runs on (classification reads it)
        self.to_shm: ShmTargets | None = None
        self.decoupled = False
        self.empty_final = False
        self.cancellation: Cancellation | None = None
        #: the message of an error that refused the request before it ran
        self.refusal = ""
        #: the gRPC status of that error (a ``triton_grpc_error`` stream ends with it)
        self.refusal_status = grpc.StatusCode.INTERNAL
        #: an ordinary model's answer, held until the answers before it are sent
        self.answer: tuple[InferenceResponse | None, bool] | None = None

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        """``on_response`` of :meth:`InferenceServer.stream`: any thread, under the
        request's sender lock, so only a count and a queue put."""
        self.stream.offer(self, response, final)


def _empty_final_wanted(request: InferenceRequest) -> bool:
    """Take ``triton_enable_empty_final_response`` out of the request's parameters (it is
    for the frontend, not the model); it must be a bool, as tritonserver checks."""
    if EMPTY_FINAL_PARAMETER not in request.parameters:
        return False
    value = request.parameters.pop(EMPTY_FINAL_PARAMETER)
    if not isinstance(value, bool):
        raise invalid_arg(f"invalid value type for '{EMPTY_FINAL_PARAMETER}' parameter, "
                          f"expected bool_param (model '{request.model_name}')")
    return value


class Stream:
    """The state of one ``ModelStreamInfer`` call. :meth:`read` runs on a thread of its
    own; :meth:`responses` is the handler's generator; :meth:`call_ended` is the call's
    termination callback."""

    def __init__(self, server: InferenceServer, encoder: ResponseEncoder,
                 forwarded: dict[str, str] | None, *, idle_timeout_s: float = 0.0,
                 budget: ResponseBudget | None = None,
                 end_call: EndCall | None = None) -> None:
        self.server = server
        self.encoder = encoder
        self.forwarded = forwarded
        self.idle_timeout_s = idle_timeout_s
        # Ends the call from another thread (a generator blocked sending to a client that
        # does not read is woken only so).
        self.end_call = end_call
        self.buffer = None if budget is None else budget.open("ModelStreamInfer",
                                                              self._overflowed)
        #: (status, message) the call ends with, when the stream ended it (idle, overflow)
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.closed = False  # nothing more is queued: the call is over or was ended
        self.last_message = time.monotonic()  # written by the reader
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Entries whose answers go out in request order (ordinary models, refusals); the
        # reader appends, the generator pops from the left (deque ends are thread-safe).
        self.ordered: deque[_Entry] = deque()
        # Requests submitted and not finished, for cancelling them when the call breaks.
        self.running: set[_Entry] = set()
        self.lock = threading.Lock()
        self.submitted = 0  # written by the reader only
        self.finished = 0  # written by the generator only
        self.over = False  # every request was answered and the generator returned
        #: the call's ``triton_grpc_error: true`` header: the first error ends the call
        #: with its status instead of going out as a message (as tritonserver does)
        self.grpc_error = False

    # --- the reader thread --------------------------------------------------------------

    def read(self, requests: Iterator[Any]) -> None:
        try:
            for message in requests:
                if self.closed:
                    break
                self.last_message = time.monotonic()
                # Counted before any answer of it can be queued.
                self.submitted += 1
                self._submit(message)
        except grpc.RpcError:
            pass  # the client cancelled or the call ended: call_ended does the rest
        except Exception:  # a bug must not leave the generator waiting forever
            log.exception("reading a gRPC stream failed")
        finally:
            self.queue.put(_READER_DONE)

    def _submit(self, message: Any) -> None:
        server = self.server
        entry = _Entry(message, self)
        try:
            if type(message) is UndecodableRequest:
                raise invalid_arg(message.message)
            model = server.model(message.model_name, message.model_version)
            request, entry.to_shm = decode_request(model.name, model.version, message,
                                                   server.shared_memory,
                                                   server.options.max_input_size)
            entry.empty_final = _empty_final_wanted(request)
            if self.forwarded:
                request.parameters.update(self.forwarded)
        except Exception as exc:
            self._refuse(entry, exc)
            return
        entry.request = request
        entry.model = model
        entry.decoupled = model.decoupled
        request.cancellation = entry.cancellation = Cancellation()
        if not entry.decoupled:
            self.ordered.append(entry)
        with self.lock:
            self.running.add(entry)
        try:
            server.stream(model, request, entry.deliver)
        except Exception as exc:
            with self.lock:
                self.running.discard(entry)
            self._refuse(entry, exc, queued=not entry.decoupled)

    def _refuse(self, entry: _Entry, exc: Exception, queued: bool = False) -> None:
        if isinstance(exc, InferenceServerError):
            entry.refusal = exc.message
            entry.refusal_status = grpc_status(exc)
        else:
            log.exception("gRPC stream inference on model '%s' failed", entry.model_name)
            entry.refusal = (f"model '{entry.model_name}': internal error: "
                             f"{type(exc).__name__}: {exc}")
        if not queued and not entry.decoupled:
            self.ordered.append(entry)
        self.offer(entry, None, True)

    def offer(self, entry: _Entry, response: InferenceResponse | None, final: bool) -> None:
        """Queue one response (or refusal, or final flag) of ``entry`` for the generator;
        dropped at once when the stream is over, or when it is one too many."""
        if self.closed:
            return
        if response is not None and self.buffer is not None and not self.buffer.add():
            return  # the stream was ended (by this response or before): drop it
        self.queue.put((entry, response, final))
        if self.closed:  # ended meanwhile, after its queue was emptied: empty it again
            self._release()

    def _overflowed(self, message: str) -> None:
        """Too many responses wait for this client (stream_buffer): end the stream."""
        log.warning("%s", message)
        self.failure = (grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        self._close()
        if self.end_call is not None:
            self.end_call(*self.failure)

    def _close(self) -> None:
        """Nothing more for this stream: cancel its requests, drop what it holds, wake
        the generator."""
        self.closed = True
        self._cancel_running()
        self._release()
        self.queue.put(_CALL_ENDED)

    def _release(self) -> None:
        """Drop the queued responses and the entries (each refers to this stream: left
        queued, they would make a cycle that only a full garbage collection frees)."""
        ended = False
        while True:
            try:
                ended = self.queue.get_nowait() is _CALL_ENDED or ended
            except queue.Empty:
                break
        if ended:
            self.queue.put(_CALL_ENDED)  # the generator still has to see it
        self.ordered.clear()

    # --- the call ----------------------------------------------------------------------

    def call_ended(self) -> None:
        """The call is over (gRPC runs this once, on any thread): unless every request was
        answered, cancel those still running and stop the generator."""
        if not self.over:
            self._close()
        if self.buffer is not None:
            self.buffer.close()

    def _cancel_running(self) -> None:
        with self.lock:
            running, self.running = self.running, set()
        for entry in running:
            if entry.cancellation is not None:
                entry.cancellation.cancel()

    # --- the handler's generator --------------------------------------------------------

    def responses(self) -> Iterator[bytes]:
        """The serialized ``ModelStreamInferResponse`` messages, until the client has sent
        its last request and every request is answered (or the call ends)."""
        reader_done = False
        get = self.queue.get
        idle_s = self.idle_timeout_s
        try:
            while True:
                if idle_s and not reader_done and self.submitted == self.finished:
                    wait = self.last_message + idle_s - time.monotonic()
                    if wait <= 0 and self.submitted == self.finished:
                        self.failure = (grpc.StatusCode.UNAVAILABLE, (
                            f"ModelStreamInfer: the stream sent no request for {idle_s:g} s "
                            f"with none in flight ({IDLE_TIMEOUT_FLAG}); open a new one"))
                        return
                    try:
                        item = get(timeout=max(wait, 0.001))
                    except queue.Empty:
                        continue
                else:
                    item = get()
                if item is _READER_DONE:
                    reader_done = True
                elif item is _CALL_ENDED:
                    return
                else:
                    yield from self._answered(*item)
                if reader_done and self.finished == self.submitted:
                    self.over = True
                    return
        except _EndStream:
            return  # self.failure holds the status; the handler aborts with it
        finally:
            if not self.over:  # the call broke, or grpc closed this generator
                self._close()
            else:
                self.closed = True
                self._release()
            if self.buffer is not None:
                self.buffer.close()

    def _answered(self, entry: _Entry, response: InferenceResponse | None, final: bool
                  ) -> Iterator[bytes]:
        """The messages one response of ``entry`` lets out: its own (a decoupled model's),
        or an ordinary model's answer with those behind it in request order that were
        held for it. Raises :class:`_EndStream` when an error ends the call."""
        if final:
            self.finished += 1
            with self.lock:
                self.running.discard(entry)
        if entry.decoupled:
            message = self._encode(entry, response, final)
            if message is not None:
                yield message
            return
        entry.answer = (response, final)
        ordered = self.ordered
        while ordered and ordered[0].answer is not None:
            head = ordered.popleft()
            message = self._encode(head, *head.answer)  # type: ignore[misc]
            if message is not None:
                yield message

    def _encode(self, entry: _Entry, response: InferenceResponse | None,
                final: bool) -> bytes | None:
        """The message for one response of ``entry`` (None: nothing to send)."""
        if response is not None and self.buffer is not None:
            self.buffer.taken()  # encoded now: the bytes no longer hold its outputs
        if entry.refusal:
            if self.grpc_error:
                self._end_with(entry.refusal_status, entry.refusal)
            return stream_error(entry.refusal, entry.request_id)
        if response is None:  # the final flag alone
            if entry.empty_final:
                return stream_empty_final(entry.model_name, entry.request_id)
            return None
        if response.error is not None:
            if self.grpc_error:
                self._end_with(grpc_status(response.error), response.error.message)
            return stream_error(response.error.message, entry.request_id, entry.model_name,
                                final)
        assert entry.request is not None
        try:
            response = classify_response(entry.model, entry.request, response)
            body = self.encoder.encode(entry.request, response, entry.to_shm)
        except InferenceServerError as err:  # e.g. an output too large for its region
            if self.grpc_error:  # as tritonserver: the encoding error ends the call too
                self._end_with(grpc_status(err), err.message)
            return stream_error(err.message, entry.request_id, entry.model_name, final)
        except Exception as exc:
            log.exception("encoding a stream response of model '%s' failed",
                          entry.model_name)
            message = (f"model '{entry.model_name}': internal error: "
                       f"{type(exc).__name__}: {exc}")
            if self.grpc_error:
                self._end_with(grpc.StatusCode.INTERNAL, message)
            return stream_error(message, entry.request_id, entry.model_name, final)
        return stream_response(body + (FINAL if final else NOT_FINAL))

    def _end_with(self, code: grpc.StatusCode, message: str) -> None:
        """``triton_grpc_error``: end the call with this error's status (the generator's
        ``finally`` cancels the requests still running)."""
        self.failure = (code, message)
        raise _EndStream
