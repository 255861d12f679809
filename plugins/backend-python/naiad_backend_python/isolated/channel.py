"""The server's end of one worker's socket: requests out, results in, tensors through the
shared memory region.

Batches are sent from whichever thread submits them and several may be in flight: the
worker takes them in order, and while it executes one the next is already waiting in its
socket, so neither side idles while the other encodes. The answers are read on the server's
event loop (``transport.py``), which completes each batch's callback, or, outside a server,
by a reader thread. A batch whose tensors total at least
``shm-inline-max-byte-size`` goes through the region, one such batch at a time (the region
holds one batch's inputs and outputs); smaller ones travel inside their message, where the
worker reads them as views of the received bytes, no copy either.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from naiad.errors import InferenceServerError, Status, unavailable
from naiad.types import InferenceClient, InferenceRequest, InferenceResponse, Tensor
from naiad_backend_python.isolated.calls import Handler, ServerCalls
from naiad_backend_python.isolated.execute_header import RequestEntry, execute_header
from naiad_backend_python.isolated.regions import RegionPolicy, free_space
from naiad_backend_python.isolated.transport import LoopTransport
from naiad_backend_python.responses import model_response, status_named
from naiad_backend_python.stub import naiad_stub_plain as plain
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")
model_log = logging.getLogger("naiad.model")

#: What a batch's callback gets: one response per request, or the batch's failure (an
#: :class:`InferenceServerError` the model raised, or :class:`WorkerDied`).
Done = Callable[[Any], object]


class WorkerDied(Exception):
    """The worker's socket closed under a call: the process ended."""


class _Staged(NamedTuple):
    """A batch ready to send: its requests, their tensors' bytes, and their total size."""

    requests: Sequence[InferenceRequest]
    tensors: list[list[tuple[str, str, tuple[int, ...], memoryview]]]
    size: int
    done: Done
    # Some request streams its responses (decoupled) or can be cancelled: the channel
    # keeps track of it (most batches, HTTP's, have neither).
    watched: bool
    # No request has parameters or a trace: the header can be packed straight to its
    # binary form (execute_header).
    plain: bool


class _Pending(NamedTuple):
    done: Done
    region: wire.Region | None  # where the batch's tensors went, if it used the region
    started: float = 0.0  # time.monotonic() when sent, where an execute timeout is set


class _LateBatch:
    """A batch answered with some responses still to come: an ordinary model's requests
    that execute returned None for, whose responses the model sends afterwards (``response``
    messages). ``done`` gets the batch's responses once the last one came."""

    __slots__ = ("done", "missing", "responses")

    def __init__(self, done: Done, responses: list[InferenceResponse | None]) -> None:
        self.done = done
        self.responses = responses
        self.missing = sum(response is None for response in responses)


class WorkerChannel:
    """Talks to one worker process. ``call`` (one answer, synchronously) before
    :meth:`start_reading`; ``submit`` after it, from any thread."""

    def __init__(self, connection: wire.Connection, model_name: str, instance_name: str,
                 regions: RegionPolicy) -> None:
        self.connection = connection
        self.model_name = model_name
        self.instance_name = instance_name
        self.regions = regions
        self.region: wire.Region | None = None
        self._region_failed = False
        self._region_busy = False
        self._output_hint = 0  # bytes the last region batch's outputs took
        # Guards everything below, and the order of messages on the socket.
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._waiting: collections.deque[_Staged] = collections.deque()  # for the region
        self._gone = False
        self._finalized = threading.Event()
        self._finalize_reply: dict = {}
        self._reader: threading.Thread | None = None
        self._transport: LoopTransport | None = None
        # How batches are sent once reading started: the blocking connection's send (with a
        # reader thread) or the loop transport's (never blocks).
        self._send_frame: Callable[..., None] | None = None
        self._send_whole: Callable[[list[Any]], None] | None = None  # a frame made whole
        # The worker's calls to the server (BLS...), once reading started.
        self.calls: ServerCalls | None = None
        # Requests of a decoupled model whose stream is open: (batch id, index) -> request.
        self._streams: dict[tuple[int, int], InferenceRequest] = {}
        # Batches waiting for responses sent after their result, by batch id (rare).
        self._late: dict[int, _LateBatch] = {}
        # The traces of the traced requests sent, by id, while they live: a BLS call names
        # the trace of the request it is made for (InferenceRequest.trace).
        self.traces: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # on_fault(reason): the worker broke the protocol (bytes that are not a message, a
        # header that cannot be read) or outlived the execute timeout; the process owner
        # ends it (process.py), and the end of the stream fails what is in flight.
        self.on_fault: Callable[[str], object] | None = None
        # EXECUTE_TIMEOUT_SECONDS (0: none, as in Triton): see watch_execute_time.
        self.execute_timeout_s = 0.0
        self._last_result = 0.0  # time.monotonic() of the last result, with a timeout

    # --- one question, one answer (starting the worker, auto-complete) ------------------

    def call(self, header: dict) -> dict:
        """Send one message and return the worker's answer (its log messages on the way
        are logged, and its questions answered: a model may make custom metrics in
        ``initialize``). Only before :meth:`start_reading`. Raises :class:`WorkerDied`."""
        try:
            self.connection.send(header)
            while True:
                reply, payload, fds = self.connection.receive()
                op = reply.get("op")
                calls = self.calls
                if calls is not None and calls.handles(str(op)):
                    calls.handle(reply, payload, fds)
                    continue
                wire.close_fds(fds)  # no answer brings descriptors
                if op != "log":
                    return reply
                self._log(reply)
        except wire.ProtocolError as exc:
            self._fault(str(exc))
            raise WorkerDied(f"it broke the worker protocol: {exc}") from None
        except (wire.PeerGone, OSError) as exc:
            raise WorkerDied(str(exc)) from None

    def serve_calls(self, server: InferenceClient | None,
                    handlers: dict[str, Handler] | None = None) -> None:
        """From now on, answer the worker's calls (``isolated/calls.py``): ``server`` is
        what the model's BLS calls reach; ``handlers`` serve further questions, by ``op``."""
        self.calls = ServerCalls(server, self._send, self.regions.directory,
                                 self.regions.inline_max, handlers, self.traces.get)

    def _send(self, header: dict, buffers: Sequence[memoryview] = (),
              fds: Sequence[int] = ()) -> None:
        """Send from any thread: through the loop transport once reading started (never
        blocking), before that through the connection."""
        send = self._send_frame or self.connection.send
        send(header, buffers, fds)

    # --- batches ------------------------------------------------------------------------

    def start_reading(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """From now on, answers are read on ``loop`` (``transport.py``), or by a thread of
        this channel's own when there is no loop (a backend used outside a server)."""
        if loop is None:
            self._send_frame = self.connection.send
            self._send_whole = self.connection.send_frame
            self._reader = threading.Thread(target=self._read, daemon=True,
                                            name=f"naiad-read-{self.instance_name}")
            self._reader.start()
            return
        buffered, fds = self.connection.detach()
        transport = LoopTransport(self.connection.sock, loop, self._handle, self._ended,
                                  buffered, fds, self._fault, self._plain_result)
        self._transport = transport
        self._send_frame = transport.send
        self._send_whole = transport.send_frame
        transport.start()

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._waiting) + len(self._late)

    def submit(self, requests: Sequence[InferenceRequest], done: Done) -> None:
        """Send a batch (or queue it behind the region batch in flight); ``done`` gets its
        responses, its failure, or :class:`WorkerDied`, once, from the reader thread (or
        from this call, when the worker is gone already)."""
        if len(requests) == 1 and self._submit_one(requests[0], done):
            return
        tensors = []
        size = 0
        watched = False
        plain = True
        for request in requests:
            if request.sender is not None or request.cancellation is not None:
                watched = True
            if request.parameters or request.trace is not None:
                plain = False
            staged = []
            for tensor in request.inputs.values():
                data = wire.tensor_buffer(tensor.datatype, tensor.data)
                size += wire.align(len(data))
                staged.append((tensor.name, tensor.datatype, tensor.data.shape, data))
            tensors.append(staged)
        batch = _Staged(requests, tensors, size, done, watched, plain)
        with self._lock:
            gone = self._gone
            wants_region = size >= self.regions.inline_max and not self._region_failed
            if not gone and wants_region:
                if self._region_busy:
                    self._waiting.append(batch)
                    return
                self._region_busy = True  # this thread holds the region until the answer
        if gone:
            done(WorkerDied("the worker process has ended"))
            return
        self._dispatch(batch, wants_region)

    def _submit_one(self, request: InferenceRequest, done: Done) -> bool:
        """Send the usual batch in one pass (``naiad_stub_plain.execute_frame``): one
        request, with no parameters, trace or stream, whose tensors travel in the message.
        False (nothing sent) for any other request, which :meth:`submit`'s general way
        takes. The same message as the general way's (``test_backend_python_channel.py``),
        for a third of the work: this runs for nearly every request (issue 26)."""
        if request.sender is not None or request.parameters or request.trace is not None:
            return False
        requested = request.requested_outputs
        try:
            frame, aligned = plain.execute_frame(
                request.id, None if requested is None else [o.name for o in requested],
                [(tensor.name, tensor.datatype, tensor.data)
                 for tensor in request.inputs.values()])
        except (KeyError, struct.error):
            return False  # a field beyond the binary layout: JSON carries it
        if aligned >= self.regions.inline_max and not self._region_failed:
            return False  # the region's batch: the general way
        with self._lock:
            batch_id = -1 if self._gone else self._number(done, None)
        if batch_id < 0:
            done(WorkerDied("the worker process has ended"))
            return True
        assert self._send_whole is not None, "submit before start_reading"
        try:
            self._send_whole(plain.numbered(frame, batch_id))
            if request.cancellation is not None:  # every gRPC request has one
                self._watch_cancellations((request,), batch_id)
        except (wire.PeerGone, OSError):
            pass  # the reader sees the end of the stream and fails what is pending
        return True

    def _dispatch(self, batch: _Staged, holds_region: bool) -> None:
        """Pack and send a batch. ``holds_region``: the caller holds the region (only one
        batch uses it at a time), so it may grow or replace it. Never called with
        ``_lock`` held: a send may block until the worker reads, and the reader thread
        needs the lock meanwhile."""
        fds: list[int] = []
        region = None
        if holds_region:
            fds = self._fit_region(batch.size + self._output_hint)
            region = self.region
        with self._lock:
            if self._gone:
                batch_id = -1
            else:
                batch_id = self._number(batch.done, region)
                if batch.watched:
                    for index, request in enumerate(batch.requests):
                        if request.sender is not None:
                            self._streams[(batch_id, index)] = request
        try:
            if batch_id < 0:
                batch.done(WorkerDied("the worker process has ended"))
                return
            packer = wire.Packer(region)
            entries: list[RequestEntry] = []
            for request, tensors in zip(batch.requests, batch.tensors, strict=True):
                requested = request.requested_outputs
                entries.append((request.id,
                                None if requested is None else [o.name for o in requested],
                                [packer.add_buffer(name, datatype, shape, data)
                                 for name, datatype, shape, data in tensors]))
            assert self._send_frame is not None, "submit before start_reading"
            header = execute_header(
                batch_id, packer.offset if region is not None else None, batch.requests,
                entries, batch.plain and not fds,
                region.size if fds and region is not None else None, self.traces)
            self._send_frame(header, packer.payload, fds)
            if batch.watched:
                self._watch_cancellations(batch.requests, batch_id)
        except (wire.PeerGone, OSError):
            pass  # the reader sees the end of the stream and fails what is pending
        finally:
            for fd in fds:
                os.close(fd)
            if holds_region and region is None:
                self._release_region()  # no region could be made: the batch went inline

    def _number(self, done: Done, region: wire.Region | None) -> int:
        """The next batch's id, its answer awaited from now on (the caller holds ``_lock``
        and has seen the worker is not gone)."""
        batch_id = self._next_id
        self._next_id += 1
        self._pending[batch_id] = (_Pending(done, region, time.monotonic())
                                   if self.execute_timeout_s else _Pending(done, region))
        return batch_id

    def _watch_cancellations(self, requests: Sequence[InferenceRequest], batch_id: int
                             ) -> None:
        for index, request in enumerate(requests):
            if request.cancellation is not None:
                request.cancellation.on_cancel(
                    lambda index=index: self._cancel(batch_id, index))

    def set_log_level(self, level: int) -> None:
        """The server's log level changed: the worker makes records from ``level`` on."""
        if self._gone:
            return
        try:
            self._send({"op": "log_level", "level": level})
        except (wire.PeerGone, OSError):
            pass

    def _cancel(self, batch_id: int, index: int) -> None:
        """The client gave up on a request the worker has: tell it (``is_cancelled()``)."""
        if self._gone or self._send_frame is None:
            return
        try:
            self._send_frame({"op": "cancel", "batch": batch_id, "index": index})
        except (wire.PeerGone, OSError):
            pass

    def _release_region(self) -> None:
        """The region's batch is done: hand the region to the next batch waiting for it."""
        with self._lock:
            batch = self._waiting.popleft() if self._waiting and not self._gone else None
            if batch is None:
                self._region_busy = False
                return
            region = self.region
            small = (region is not None and not self._region_failed
                     and batch.size + self._output_hint <= region.size)
        if small:  # its message is a header: sending it cannot block the reader for long
            self._dispatch(batch, True)
        else:  # it may grow the region or go inline: not on the reader thread
            threading.Thread(target=self._dispatch, args=(batch, True), daemon=True).start()

    def _fit_region(self, needed: int) -> list[int]:
        """Make the region big enough for ``needed`` bytes where the policy allows; return
        the descriptor to send when a new region was made (the worker maps it)."""
        region = self.region
        if self._region_failed or (region is not None and needed <= region.size):
            return []
        size = self.regions.size_for(needed)
        if region is not None and size <= region.size:
            return []  # at the maximum already: what does not fit goes in the payload
        try:
            new, fd = wire.create_region(self.regions.directory, size)
        except OSError as exc:
            self._region_failed = True
            log.warning("model '%s' instance '%s': no shared memory region of %d bytes in "
                        "%s (%s; %s): its tensors travel over the worker's socket instead, "
                        "which copies them once more", self.model_name, self.instance_name,
                        size, self.regions.directory, exc.strerror or exc,
                        free_space(self.regions.directory))
            return []
        if region is not None:
            region.close()
        self.region = new
        return [fd]

    # --- the reader thread --------------------------------------------------------------

    def _read(self) -> None:
        try:
            while True:
                message = self.connection.receive()
                try:
                    self._handle(*message)
                except Exception:  # the reader must outlive a broken message or callback
                    log.exception("model '%s' instance '%s': handling a message from the "
                                  "worker failed", self.model_name, self.instance_name)
        except ValueError as exc:  # not a message: nothing after it can be read
            self._fault(str(exc))
        except (wire.PeerGone, OSError):
            pass
        self._fail_pending()

    def _fault(self, reason: str) -> None:
        """The worker broke the protocol (or outlived the execute timeout): it is ended,
        as a crash would end it, and restarted; what it had in flight fails."""
        log.error("model '%s' instance '%s': %s; its worker process is ended and restarted",
                  self.model_name, self.instance_name, reason)
        on_fault = self.on_fault
        if on_fault is not None:
            on_fault(reason)

    def watch_execute_time(self, stopped: threading.Event) -> None:
        """With an execute timeout: until ``stopped`` or the stream ends, end the worker when
        the oldest batch in flight has run longer than it (a thread of its own, started
        only where the timeout is set: nothing is timed per batch otherwise)."""
        timeout = self.execute_timeout_s
        period = min(max(timeout / 4, 0.01), 1.0)
        while not stopped.wait(period) and not self._gone:
            with self._lock:
                oldest = next(iter(self._pending.values()), None)
            # the worker runs batches in order: the oldest started when it was sent or when
            # the one before it ended, whichever came last
            if oldest is not None and \
                    time.monotonic() - max(oldest.started, self._last_result) > timeout:
                self._fault(f"a batch ran longer than the execute timeout of {timeout:g} s "
                            f"(EXECUTE_TIMEOUT_SECONDS)")
                return

    def _handle(self, reply: dict, payload: memoryview, fds: list[int]) -> None:
        """One message from the worker (on the reader thread or the loop)."""
        op = reply.get("op")
        if op == "result":  # first: one per batch
            if fds:
                wire.close_fds(fds)  # only the messages below bring descriptors
            self._finished(reply, payload)
            return
        if op == "response":
            self._streamed(reply, payload, fds)
            return
        calls = self.calls
        if calls is not None and calls.handles(str(op)):
            calls.handle(reply, payload, fds)
            return
        wire.close_fds(fds)  # only the messages above bring descriptors
        if op == "log":
            self._log(reply)
        elif op == "finalized":
            self._finalize_reply = reply
            self._finalized.set()

    def _streamed(self, message: dict, payload: memoryview, fds: list[int]) -> None:
        """A decoupled model's response: on to the request's sender (the client)."""
        key = (message.get("batch"), message.get("index"))
        final = bool(message.get("final"))
        try:
            region = wire.open_region(message, fds)
            body = message.get("response")
            response = None if body is None else self._response(body, payload, region)
        except Exception as exc:  # a response this side cannot read: the stream ends with it
            response = InferenceResponse(error=InferenceServerError(
                f"model '{self.model_name}' instance '{self.instance_name}': unreadable "
                f"response from the worker: {type(exc).__name__}: {exc}", Status.INTERNAL))
            final = True
        with self._lock:
            request = (self._streams.pop(key, None) if final  # type: ignore[arg-type]
                       else self._streams.get(key))  # type: ignore[arg-type]
        if request is None and self._late:
            self._late_response(key, response)  # type: ignore[arg-type]
            return
        if request is None or request.sender is None:
            return  # the stream was ended (by an error, the batch's failure) already
        try:
            request.sender.send(response, final)
        except RuntimeError:
            pass  # the server ended the stream meanwhile

    def _late_response(self, key: tuple[int, int], response: InferenceResponse | None
                       ) -> None:
        """An ordinary model's response sent after its batch's result."""
        batch_id, index = key
        with self._lock:
            late = self._late.get(batch_id)
            if late is None or not 0 <= index < len(late.responses) \
                    or late.responses[index] is not None:
                late = None
            else:
                late.responses[index] = response or InferenceResponse(
                    error=InferenceServerError(
                        f"model '{self.model_name}' instance '{self.instance_name}': the "
                        f"worker sent an empty response", Status.INTERNAL))
                late.missing -= 1
                if late.missing:
                    return
                del self._late[batch_id]
        if late is None:
            log.error("model '%s' instance '%s': the worker sent a response for request %r, "
                      "which is not in flight; ignored", self.model_name, self.instance_name,
                      key)
            return
        late.done(late.responses)

    def _response(self, body: dict, payload: memoryview, region: wire.Region | None
                  ) -> InferenceResponse:
        error = body.get("error")
        outputs = []
        if error is None:
            for descriptor in body.get("outputs", ()):
                name, datatype, array = wire.unpack(descriptor, region, payload, copy=False)
                outputs.append(Tensor(name, datatype, array.shape, array))
        return model_response(outputs, body.get("parameters"), error)

    def _ended(self) -> None:
        """On the loop: the stream ended. Failing the batches may wait for the process's
        exit status, which the loop must not: a thread does it."""
        threading.Thread(target=self._fail_pending, daemon=True,
                         name=f"naiad-ended-{self.instance_name}").start()

    def _fail_pending(self) -> None:
        with self._lock:
            self._gone = True
            failed = [p.done for p in self._pending.values()] + [b.done for b in self._waiting]
            self._pending.clear()
            self._waiting.clear()
            streams = list(self._streams.values())
            self._streams.clear()
            late = list(self._late.values())
            self._late.clear()
        self._finalized.set()
        for done in failed:
            done(WorkerDied("the worker process ended"))
        for batch in late:  # what came stays; the rest fails
            gone = InferenceResponse(error=unavailable(
                f"model '{self.model_name}' instance '{self.instance_name}': the worker "
                f"process ended before the model sent the response"))
            batch.done([gone if response is None else response
                        for response in batch.responses])
        # Streams whose batch had returned: their model cannot send any more.
        for request in streams:
            if request.sender is not None:
                request.sender.fail(unavailable(
                    f"model '{self.model_name}' instance '{self.instance_name}': the worker "
                    f"process ended before the last response"))
        if self.calls is not None:
            self.calls.cancel_all()

    def _finished(self, reply: dict, payload: memoryview) -> None:
        """A batch's result, in its general form (a dict)."""
        pending = self._in_flight(reply.get("id"), "failure" in reply)
        if pending is None:
            return
        region = pending.region
        try:
            result: Any = self._responses(reply, payload, region)
        except InferenceServerError as exc:
            result = exc
        except Exception as exc:  # a reply this side cannot read: the batch fails
            result = self._unreadable(exc)
        if type(result) is _Deferred:  # responses to come after the result
            with self._lock:
                if not self._gone:
                    self._late[reply["id"]] = _LateBatch(pending.done, result.responses)
                    pending = None  # type: ignore[assignment]
            if pending is not None:
                result = unavailable(f"model '{self.model_name}' instance "
                                     f"'{self.instance_name}': the worker process ended "
                                     f"before the model sent the response")
        if region is not None:
            if reply.get("retire_region"):
                # The model kept inputs that live in the region (naiad_stub_main): with this
                # batch's outputs copied out, the next batch gets a new region.
                if self.region is region:
                    self.region = None
                region.close()
            self._release_region()
        if pending is not None:
            pending.done(result)

    def _plain_result(self, batch_id: int, outputs: list[list[plain.Named]], taken: int
                      ) -> None:
        """A batch's result in its plain form (``naiad_stub_plain.read_result``: every
        response has outputs, all of them in the message, none has parameters or an error,
        no failure, the region kept), its outputs read as arrays already: what
        :meth:`_finished` does for it, without the dict. Nearly every batch ends here
        (issue 26)."""
        pending = self._in_flight(batch_id, False)
        if pending is None:
            return
        result = [model_response([Tensor(name, datatype, array.shape, array)
                                  for name, datatype, array in tensors], None, None)
                  for tensors in outputs]
        if pending.region is not None:  # a region batch whose outputs did not fit in it
            self._output_hint = taken
            self._release_region()
        pending.done(result)

    def _in_flight(self, batch_id: Any, failed: bool) -> _Pending | None:
        """The pending batch ``batch_id`` answered, no longer awaited (None, logged, for one
        that is not in flight); a failed batch's streams end with it."""
        if self.execute_timeout_s:
            self._last_result = time.monotonic()
        with self._lock:
            pending = self._pending.pop(batch_id, None)
            if self._streams and failed:  # the core ends them with the failure
                for key in [key for key in self._streams if key[0] == batch_id]:
                    del self._streams[key]
        if pending is None:
            log.error("model '%s' instance '%s': the worker answered batch %r, which is not "
                      "in flight; ignored", self.model_name, self.instance_name, batch_id)
        return pending

    def _unreadable(self, exc: Exception) -> InferenceServerError:
        return InferenceServerError(
            f"model '{self.model_name}' instance '{self.instance_name}': unreadable answer "
            f"from the worker: {type(exc).__name__}: {exc}", Status.INTERNAL)

    @staticmethod
    def _outputs(descriptors: list[wire.Descriptor], payload: memoryview,
                 region: wire.Region | None) -> tuple[list[Tensor], int]:
        """The output tensors of one response, copied out of the region (the next batch
        reuses it), and the bytes they took there (the next region batch is sized by them,
        ``_output_hint``)."""
        outputs = []
        size = 0
        for descriptor in descriptors:
            name, datatype, array = wire.unpack(descriptor, region, payload, copy=True)
            if region is not None:
                size += wire.align(descriptor[5])
            outputs.append(Tensor(name, datatype, array.shape, array))
        return outputs, size

    def _responses(self, reply: dict, payload: memoryview, region: wire.Region | None
                   ) -> list[InferenceResponse]:
        failure = reply.get("failure")
        if failure is not None:
            status, message = failure
            log.error("%s", message)
            raise InferenceServerError(message, status_named(status))
        responses: list[Any] = []
        output_bytes = 0
        deferred = False
        for answer in reply["responses"]:
            if answer is None:  # the model sends this one after the result
                responses.append(None)
                deferred = True
                continue
            error = answer.get("error")
            outputs: list[Tensor] = []
            if error is None:
                outputs, size = self._outputs(answer["outputs"], payload, region)
                output_bytes += size
            responses.append(model_response(outputs, answer.get("parameters"), error))
        if region is not None:
            self._output_hint = output_bytes
        if deferred:
            return _Deferred(responses)  # type: ignore[return-value]
        return responses

    def _log(self, message: dict) -> None:
        """Log a record the worker sent as if the model had logged it here."""
        level = message.get("level", logging.INFO)
        if model_log.isEnabledFor(level):
            record = model_log.makeRecord(
                model_log.name, level, message.get("pathname", ""), message.get("lineno", 0),
                "%s", (message.get("message", ""),), None, message.get("function"),
                {"model": self.model_name, "instance": self.instance_name})
            model_log.handle(record)

    # --- the end ------------------------------------------------------------------------

    def finalize(self, timeout_s: float) -> dict | None:
        """Ask the worker to run ``finalize`` and exit; its answer, or None when it did not
        answer within ``timeout_s`` (or had ended)."""
        if self._send_frame is None:  # never read: nothing is in flight
            try:
                return self.call({"op": "finalize"})
            except WorkerDied:
                return None
        try:
            self._send_frame({"op": "finalize"})
        except (wire.PeerGone, OSError):
            return None
        if not self._finalized.wait(timeout_s):
            return None
        return self._finalize_reply or None

    def close(self) -> None:
        """Release the socket and the region (the process has ended)."""
        if self._reader is not None:
            self._reader.join()
        if self._transport is not None:
            self._transport.close()
        self.connection.close()
        if self.region is not None:
            self.region.close()
            self.region = None


class _Deferred(NamedTuple):
    """A batch's responses with None where a response comes after the result."""

    responses: list[InferenceResponse | None]
