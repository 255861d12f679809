"""The worker process of one Python model instance: naiad's counterpart of Triton's stub.

The server starts it as ``<the model's python> naiad_stub_main.py FD PARENT_PID``, where FD is
its end of a Unix socket pair. Python puts this file's folder first on ``sys.path``, so
``triton_python_backend_utils`` and the ``naiad_stub_*`` modules beside it are what the model
imports; nothing of the server (naiad, its dependencies) is needed, only numpy.

The model runs on the main thread, one job at a time, in the order they came; that thread
also reads the server's messages (``naiad_stub_wire`` frames) while the model is idle, and a
helper thread reads them while a job runs long or the model waits for the server:

- ``init``: protocol version, model file, ``initialize`` args, output names -> ``ready``
  (pid, interpreter, Python version) or ``failed`` (why);
- ``auto_complete``: model file and config JSON -> ``config`` or ``failed``;
- ``execute``: a batch of requests (tensors in the shared memory region or the payload)
  -> ``result``: one response per request, or the batch's failure. A decoupled model's
  responses go as ``response`` messages (``batch``, ``index``, ``final``), whenever and
  from whichever thread the model sends them; so does an ordinary model's one response when
  execute returned None for its request without it (its entry in ``result`` is null, and
  the ``response`` message follows the ``result``);
- ``finalize`` -> ``finalized``, then the process exits.

Whoever reads handles ``cancel`` (``batch``, ``index``: the client gave up on that request;
``is_cancelled()`` turns true), ``log_level`` (the server's verbose logging turned on or
off: the level the model's records are made from) and ``answer`` (to the model's calls to
the server, ``naiad_stub_calls``) at once, so they arrive while the model runs.

An ``execute`` message may carry a new shared memory region (``region_size`` and its
descriptor). The worker sends ``log`` messages whenever the model logs. It ignores SIGINT
(a Ctrl-C in the server's terminal is for the server, which finalizes its workers) and ends
within a second of the server, however the server ends.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import select
import signal
import socket
import struct
import sys
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

import naiad_stub_calls as calls
import naiad_stub_plain as plain
import naiad_stub_runner as runner
import naiad_stub_shared_memory as shared_memory
import naiad_stub_wire as wire
import numpy as np
import triton_python_backend_utils as pb_utils

# How often the worker looks whether the server is still there.
PARENT_POLL_S = 1.0
# How often the helper thread looks whether a job has run long enough to need a reader
# (cancellations arrive within about twice this), and after how long without a job it
# sleeps until the next one starts.
HELPER_POLL_S = 0.01
HELPER_SLEEP_AFTER_S = 0.1


class _Input:
    __slots__ = ("data", "datatype", "name")

    def __init__(self, name: str, datatype: str, data: Any) -> None:
        self.name = name
        self.datatype = datatype
        self.data = data


class _Requested:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Cancelled:
    """A request's cancellation (what ``naiad.types.Cancellation`` is in the server):
    cancelled once the server's ``cancel`` for its key came. The worker keeps only the
    keys of cancelled requests: nothing is done per request until one is cancelled."""

    __slots__ = ("key", "keys")

    def __init__(self, key: Tuple[int, int], keys: Set[Tuple[int, int]]) -> None:
        self.key = key
        self.keys = keys

    @property
    def cancelled(self) -> bool:
        return self.key in self.keys


class _Request:
    """What the runner reads of a request (the attributes of naiad's InferenceRequest)."""

    __slots__ = ("cancellation", "id", "inputs", "key", "parameters", "requested_outputs",
                 "trace")

    def __init__(self, message: Any, region: wire.Region | None,
                 payload: memoryview, key: Tuple[int, int], cancellation: _Cancelled) -> None:
        """``message``: the request's entry in the ``execute`` header, or, for a plain one,
        what ``naiad_stub_plain.read_execute`` read (its inputs as arrays already)."""
        self.key = key  # (batch id, index in the batch): how the server names it
        self.cancellation = cancellation
        if type(message) is tuple:
            self.id, outputs, named = message
            self.parameters = {}
            self.trace = None
            self.requested_outputs = (None if outputs is None else
                                      [_Requested(name) for name in outputs])
            self.inputs = {name: _Input(name, datatype, array)
                           for name, datatype, array in named.values()}
            return
        self.id = message.get("id", "")
        self.parameters = message.get("parameters") or {}
        # the id of the server's trace of this request (None: not traced), for BLS calls
        self.trace = message.get("trace")
        outputs = message.get("outputs")
        self.requested_outputs = None if outputs is None else [_Requested(n) for n in outputs]
        inputs = {}
        for descriptor in message["inputs"]:
            name, datatype, array = wire.unpack(descriptor, region, payload, copy=False)
            inputs[name] = _Input(name, datatype, array)
        self.inputs = inputs


def _region_array(array: Any, region: wire.Region) -> Any:
    """The array made straight over ``region``'s memory that ``array`` views, or None. Every
    view of it (the model's slices too) keeps it alive, so a weak reference to it tells
    whether anything still sees the region after execute."""
    while isinstance(array, np.ndarray):
        base = array.base
        if isinstance(base, memoryview):
            return array if base.obj is region.memory else None
        array = base
    return None


class _ForwardToServer(logging.Handler):
    """Sends the model's log records to the server, which logs them as its own."""

    def __init__(self, connection: wire.Connection) -> None:
        super().__init__()
        self.connection = connection

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.connection.send({"op": "log", "level": record.levelno,
                                  "logger": record.name, "message": record.getMessage(),
                                  "pathname": record.pathname, "lineno": record.lineno,
                                  "function": record.funcName})
        except Exception:  # the server is gone, or the record cannot be formatted
            pass


# What ends serve(): the server went away, or the model was finalized.
_STOP: Any = object()


class Worker:
    def __init__(self, connection: wire.Connection) -> None:
        self.connection = connection
        self.model: runner.ModelRunner | None = None
        self.region: wire.Region | None = None
        # c_python_backend_utils.shared_memory.free_memory() reads this region's size
        shared_memory.shared_memory._watch(
            lambda: self.region.size if self.region is not None else 0)
        self.link: calls.ServerLink | None = None
        # Jobs (header, payload, region) the helper read while the model ran one, in
        # arrival order; _STOP when the server went away.
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Who reads the socket: the model's thread while idle, the helper while it is busy.
        self._reading = threading.Lock()
        self._busy = False
        self._job_number = 0
        self._stopped = False
        self._helper_reading = False
        self._helper_asleep = False
        self._wanted = threading.Event()  # a model thread waits for the server's answer
        self._busy_lock = threading.Lock()
        self._busy_changed = threading.Condition(self._busy_lock)
        # Written when a job ends: the helper's select returns and it lets go of the socket.
        self._wake_r, self._wake_w = os.pipe()
        # (batch id, index) of the requests the server cancelled that may still be looked
        # at: a batch's go when its result is sent, a decoupled request's with its final
        # response. Set operations are atomic: the readers add, the model's threads remove.
        self._cancelled: Set[Tuple[int, int]] = set()
        # Decoupled requests whose stream is open (they may be cancelled after execute).
        self._open: Set[Tuple[int, int]] = set()
        # The last batch answered: a cancel for an earlier one comes too late to matter.
        self._done_batch = -1

    def serve(self) -> None:
        """Run jobs until the server goes away or the model is finalized.

        The model runs on this (the main) thread, which also reads the socket while the
        model is idle, so a batch goes from the socket to ``execute`` without a thread
        switch. While a job runs, the helper thread reads instead (:meth:`_read_while_busy`):
        answers to the model's calls and cancellations are handled at once, further jobs
        wait in ``_jobs`` for this thread. ``_reading`` says who reads."""
        threading.Thread(target=self._read_while_busy, name="naiad-reader",
                         daemon=True).start()
        try:
            while True:
                job = self._next_job()
                if job is _STOP:
                    return
                if job is not None:
                    self._busy_with(job)
        finally:
            with self._busy_lock:
                self._stopped = True
                self._busy_changed.notify()
            self._wake()

    def _next_job(self) -> Any:
        """A job the helper queued, or the next message off the socket (None: it was not
        a job, and was handled)."""
        with self._reading:
            # Under the lock: the helper queues jobs only while it holds it, so one it read
            # while this thread waited for the lock is seen here, not lost behind receive.
            if not self._jobs.empty():
                return self._jobs.get_nowait()
            connection = self.connection
            try:
                head, payload = connection.receive_raw()
                try:
                    job = plain.read_execute(head, payload)
                except ValueError as exc:
                    raise wire.ProtocolError(str(exc)) from None
                if job is not None:  # the usual batch (naiad_stub_plain)
                    batch, requests = job
                    return ({"op": "execute", "id": batch, "requests": requests, "out": None},
                            payload, self.region)
                return self._take(*connection.decode(head), payload)
            except (wire.PeerGone, wire.ProtocolError):
                return _STOP  # the server went away (or closed after finalize)

    def _take(self, header: Dict[str, Any], fds: List[int], payload: memoryview) -> Any:
        """One message off the socket: answers and cancellations are handled here and now
        (None), anything else is a job for the model's thread."""
        op = header.get("op")
        if op == "answer":
            if self.link is not None:
                self.link.answered(header, payload, fds)
            else:
                wire.close_fds(fds)
            return None
        if op == "cancel":
            self._cancel(header)
            return None
        if op == "log_level":  # the server's verbose logging was turned on or off
            logging.getLogger().setLevel(int(header.get("level", logging.INFO)))
            return None
        if fds:
            self._map_region(header, fds)
        return (header, payload, self.region)

    def _busy_with(self, job: Tuple[Dict[str, Any], memoryview, Optional[wire.Region]]
                   ) -> None:
        """Run one job. The helper takes over reading if it runs long (or the model asks
        the server something); a short one runs without waking any other thread."""
        self._job_number += 1
        self._busy = True
        if self._helper_asleep:
            with self._busy_lock:
                self._busy_changed.notify()
        try:
            self._run(job)
        finally:
            self._busy = False
            if self._helper_reading:
                self._wake()  # it stops reading (at the end of the frame it is in)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _needs_reader(self) -> None:
        """A thread of the model asked the server something: while the model's thread
        runs a job, the helper must read the answer now."""
        self._wanted.set()

    def _read_while_busy(self) -> None:
        """The helper thread. It looks every ``HELPER_POLL_S`` whether the model's thread
        is still in the job it saw last time, and reads the socket for it if so (answers,
        cancellations, the next jobs); after ``HELPER_SLEEP_AFTER_S`` without a job it
        sleeps until one starts."""
        idle_since = time.monotonic()
        while not self._stopped:
            seen = self._job_number
            wanted = self._wanted.wait(HELPER_POLL_S)
            if wanted:
                self._wanted.clear()
            if self._busy and (wanted or self._job_number == seen):
                self._read_for_the_model()
                idle_since = time.monotonic()
            elif self._busy or self._job_number != seen:  # jobs come: keep looking
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= HELPER_SLEEP_AFTER_S:
                # Asleep until the next job starts, not until the model is busy: a short
                # job is often over before this thread runs, and waiting for the next one
                # then had every job notify it (issue 26).
                with self._busy_lock:
                    self._helper_asleep = True
                    while self._job_number == seen and not self._stopped:
                        self._busy_changed.wait()
                    self._helper_asleep = False
                idle_since = time.monotonic()

    def _read_for_the_model(self) -> None:
        """Read while the model's thread is busy; queue the jobs that come."""
        sock = self.connection.sock
        self._helper_reading = True
        try:
            with self._reading:
                while self._busy and not self._stopped:
                    if not self.connection.has_frame():
                        readable, _, _ = select.select([sock, self._wake_r], [], [])
                        if self._wake_r in readable:
                            os.read(self._wake_r, 4096)
                            continue  # the job may be over: look again
                    try:
                        header, payload, fds = self.connection.receive()
                        job = self._take(header, fds, payload)
                    except (wire.PeerGone, OSError, ValueError):
                        self._jobs.put(_STOP)
                        self._stopped = True
                        return
                    if job is not None:
                        self._jobs.put(job)
        finally:
            self._helper_reading = False

    def _run(self, job: Tuple[Dict[str, Any], memoryview, Optional[wire.Region]]) -> None:
        header, payload, region = job
        op = header.get("op")
        if op == "execute":
            self._execute(header, payload, region)
        elif op == "init":
            self._init(header)
        elif op == "auto_complete":
            self._auto_complete(header)
        elif op == "finalize":
            error = self.model.finalize() if self.model is not None else None
            self.connection.send({"op": "finalized", "error": error})
            self._jobs.put(_STOP)
        else:
            self.connection.send({"op": "failed", "message": f"unknown message {op!r}"})

    def _map_region(self, header: dict[str, Any], fds: list[int]) -> None:
        if self.region is not None:
            self.region.close()
        try:
            self.region = wire.Region(fds[0], header["region_size"])
        finally:
            for fd in fds:
                os.close(fd)

    # --- cancellation -------------------------------------------------------------------

    def _cancel(self, header: Dict[str, Any]) -> None:
        """The server's ``cancel``: it may come before the model runs the request."""
        key = (int(header.get("batch", -1)), int(header.get("index", -1)))
        if key[0] > self._done_batch or key in self._open:
            self._cancelled.add(key)

    def _forget(self, keys: Any) -> None:
        cancelled = self._cancelled
        open_streams = self._open
        for key in keys:
            cancelled.discard(key)
            open_streams.discard(key)

    # --- messages -----------------------------------------------------------------------

    def _init(self, header: dict[str, Any]) -> None:
        if header.get("protocol") != wire.PROTOCOL_VERSION:
            self.connection.send({"op": "failed", "message": (
                f"the server speaks worker protocol {header.get('protocol')}, this worker "
                f"{wire.PROTOCOL_VERSION}")})
            return
        logging.getLogger().setLevel(header.get("log_level", logging.INFO))
        self.link = calls.link = calls.ServerLink(self.connection,
                                                  header.get("region_dir", ""),
                                                  int(header.get("inline_max", 1 << 62)),
                                                  self._needs_reader)
        pb_utils._set_model_calls(calls.WorkerCalls(self.link))
        try:
            self.model = runner.ModelRunner(header["model_file"], header["args"],
                                            header["outputs"], whole_process=True,
                                            emit=self._emit, late_responses=True)
        except runner.LoadFailure as exc:
            self.connection.send({"op": "failed", "message": str(exc)})
            return
        self.connection.send({"op": "ready", "protocol": wire.PROTOCOL_VERSION,
                              "pid": os.getpid(), "python": sys.executable,
                              "python_version": platform.python_version()})

    def _auto_complete(self, header: dict[str, Any]) -> None:
        try:
            config = runner.auto_complete(header["model_file"], header["config"],
                                          header["model_name"])
        except runner.LoadFailure as exc:
            self.connection.send({"op": "failed", "message": str(exc), "contract": True})
            return
        except Exception as exc:
            self.connection.send({"op": "failed", "message": runner.describe(exc)})
            return
        self.connection.send({"op": "config", "config": config})

    def _emit(self, request: _Request, result: Optional[runner.Result], final: bool) -> None:
        """A decoupled model's response to ``request``, from any of the model's threads."""
        batch, index = request.key
        message: Dict[str, Any] = {"op": "response", "batch": batch, "index": index,
                                   "final": final, "response": None}
        buffers: List[memoryview] = []
        fds: List[int] = []
        if result is not None:
            outputs, parameters, error = result
            descriptors, buffers, fds, region_size = wire.pack_tensors(
                outputs, self.link.region_dir if self.link else "",
                self.link.inline_max if self.link else 1 << 62)
            if region_size:
                message["region_size"] = region_size
            message["response"] = {"outputs": descriptors, "parameters": parameters,
                                   "error": error}
        try:
            self.connection.send(message, buffers, fds)
        finally:
            wire.close_fds(fds)
        if final:
            self._forget((request.key,))

    def _execute(self, header: Dict[str, Any], payload: memoryview,
                 region: Optional[wire.Region]) -> None:
        kept: List[Any] = []
        reply, buffers = self._run_batch(header, payload, region, kept)
        if reply is None:  # the plain result, framed already (naiad_stub_plain)
            self.connection.send_frame(buffers)
            reply = {}
        else:
            self._send_reply(reply, buffers, region, kept)
        model = self.model
        if model is not None and model._late:  # responses sent after execute returned
            if "failure" in reply:  # the batch failed after all (its outputs): none comes
                for late in model._late:
                    late.done = True
                model._late = []
            else:
                model.arm_late()
        batch = header["id"]
        self._done_batch = batch
        if (self._cancelled or self._open) and (
                model is None or not model.decoupled or "failure" in reply):
            self._forget((batch, index) for index in range(len(header["requests"])))

    def _send_reply(self, reply: Dict[str, Any], buffers: List[Any],
                    region: Optional[wire.Region], kept: List[Any]) -> None:
        # Every reference this worker held to the batch's inputs is gone with _run_batch's
        # frame; one still alive is the model's (a buffer of an output that did not fit in
        # the region may count too: that only costs a new region).
        if region is not None and any(ref() is not None for ref in kept):
            # The model kept an input (or a view of one) past execute: the next batch must
            # not overwrite it. The region is retired; the kept views keep its pages mapped
            # here, and the server makes a new region for the next batch.
            if self.region is region:
                self.region = None
            reply["retire_region"] = True
        self.connection.send(reply, buffers)

    def _run_batch(self, header: Dict[str, Any], payload: memoryview,
                   region: Optional[wire.Region], kept: List[Any]
                   ) -> Tuple[Optional[Dict[str, Any]], List[Any]]:
        """Run one batch; the reply and its payload buffers, or, for a plain result whose
        outputs travel in the message, None and the whole frame. Adds a weak reference to
        each input array that lives in ``region`` to ``kept``."""
        batch = header["id"]
        reply: Dict[str, Any] = {"op": "result", "id": batch}
        try:
            if self.model is None:
                raise runner.BatchFailure("INTERNAL", "the worker has no model (no init)")
            cancelled = self._cancelled
            requests = [_Request(message, region, payload, (batch, index),
                                 _Cancelled((batch, index), cancelled))
                        for index, message in enumerate(header["requests"])]
            if self.model.decoupled:
                self._open.update(request.key for request in requests)
            if region is not None:
                kept.extend(weakref.ref(owner) for owner in
                            (_region_array(tensor.data, region) for request in requests
                             for tensor in request.inputs.values()) if owner is not None)
            out = header.get("out")  # None: a batch that travels inside its messages
            memory = shared_memory.shared_memory
            memory._running((out or 0) if region is not None else 0)  # its inputs end at out
            try:
                results = self.model.execute(requests)
            finally:
                memory._running(0)
            if out is None or region is None:
                try:
                    frame = plain.result_frame(batch, results, runner.DEFERRED)
                except (KeyError, struct.error):  # a field out of the layout's range
                    frame = None
                if frame is not None:
                    return None, frame
            packer = wire.Packer(region if out is not None else None, out or 0)
            deferred = runner.DEFERRED
            # None: a response the model sends after execute returned (a "response" message)
            reply["responses"] = [None if result is deferred else {
                "outputs": [packer.add(name, datatype, array)
                            for name, datatype, array in result[0]],
                "parameters": result[1],
                "error": result[2],
            } for result in results]
            return reply, packer.payload
        except runner.BatchFailure as exc:
            reply["failure"] = [exc.status, exc.message]
        except Exception as exc:  # a message the worker cannot read, an output it cannot pack
            reply["failure"] = ["INTERNAL", "the worker of model instance could not handle "
                                            f"the batch: {runner.describe(exc)}"]
        return reply, []


def _die_with_parent(parent: int) -> None:
    """End this process soon after the server ends, however it ends, even while the model
    is busy (an idle worker sees its socket close). Linux's PR_SET_PDEATHSIG would fire when
    the server *thread* that started the worker ends, so a watchdog thread polls instead."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="naiad-parent-watch", daemon=True).start()


def _normal_scheduling() -> None:
    """Leave the SCHED_BATCH class the server's threads run in (``--sched-batch``), which
    a process inherits. It pays in a server whose threads contend for one GIL; a worker
    has its own, and in SCHED_BATCH a model instance woken while other processes keep
    the CPUs busy waits out their time slices: two instances of a CPU-bound model gave
    1.10-1.24x one instance's throughput on two busy cores, 1.43x in the normal class
    (issue 26; Triton's stubs 1.41-1.52x)."""
    batch = getattr(os, "SCHED_BATCH", None)
    try:
        if batch is not None and os.sched_getscheduler(0) == batch:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:  # not permitted here (a seccomp profile): the inherited class stays
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: naiad_stub_main.py SOCKET_FD PARENT_PID (started by naiad)\n")
        return 2
    _normal_scheduling()  # first: the threads started below inherit the class
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(int(argv[2]))
    connection = wire.Connection(socket.socket(fileno=int(argv[1])))
    logging.getLogger().addHandler(_ForwardToServer(connection))
    Worker(connection).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
