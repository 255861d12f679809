"""The worker process of one Python model instance: naiad's counterpart of Triton's stub.

The server starts it as ``<the model's python> naiad_stub_main.py FD PARENT_PID``, where FD is
its end of a Unix socket pair. Python puts this file's folder first on ``sys.path``, so
``triton_python_backend_utils`` and the ``naiad_stub_*`` modules beside it are what the model
imports; nothing of the server (naiad, its dependencies) is needed, only numpy. It serves one
message at a time (``naiad_stub_wire`` frames), from the server:

- ``init``: protocol version, model file, ``initialize`` args, output names -> ``ready``
  (pid, interpreter, Python version) or ``failed`` (why);
- ``auto_complete``: model file and config JSON -> ``config`` or ``failed``;
- ``execute``: a batch of requests (tensors in the shared memory region or the payload)
  -> ``result``: one response per request, or the batch's failure;
- ``finalize`` -> ``finalized``, then the process exits.

A message may carry a new shared memory region (``region_size`` and its descriptor). The
worker sends ``log`` messages whenever the model logs. It ignores SIGINT (a Ctrl-C in the
server's terminal is for the server, which finalizes its workers) and ends within a second
of the server, however the server ends.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
import socket
import sys
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

import naiad_stub_runner as runner
import naiad_stub_wire as wire
import numpy as np

# How often the worker looks whether the server is still there.
PARENT_POLL_S = 1.0


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


class _Request:
    """What the runner reads of a request (the attributes of naiad's InferenceRequest)."""

    __slots__ = ("id", "inputs", "parameters", "requested_outputs")

    def __init__(self, message: dict[str, Any], region: wire.Region | None,
                 payload: memoryview) -> None:
        self.id = message.get("id", "")
        self.parameters = message.get("parameters") or {}
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


class Worker:
    def __init__(self, connection: wire.Connection) -> None:
        self.connection = connection
        self.model: runner.ModelRunner | None = None
        self.region: wire.Region | None = None

    def serve(self) -> None:
        while True:
            try:
                header, payload, fds = self.connection.receive()
            except wire.PeerGone:
                return  # the server went away: nothing is left to do
            if fds:
                self._map_region(header, fds)
            op = header.get("op")
            if op == "execute":
                self._execute(header, payload)
            elif op == "init":
                self._init(header)
            elif op == "auto_complete":
                self._auto_complete(header)
            elif op == "finalize":
                error = self.model.finalize() if self.model is not None else None
                self.connection.send({"op": "finalized", "error": error})
                return
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

    def _init(self, header: dict[str, Any]) -> None:
        if header.get("protocol") != wire.PROTOCOL_VERSION:
            self.connection.send({"op": "failed", "message": (
                f"the server speaks worker protocol {header.get('protocol')}, this worker "
                f"{wire.PROTOCOL_VERSION}")})
            return
        logging.getLogger().setLevel(header.get("log_level", logging.INFO))
        try:
            self.model = runner.ModelRunner(header["model_file"], header["args"],
                                            header["outputs"], whole_process=True)
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

    def _execute(self, header: Dict[str, Any], payload: memoryview) -> None:
        region = self.region
        kept: List[Any] = []
        reply, buffers = self._run_batch(header, payload, region, kept)
        # Every reference this worker held to the batch's inputs is gone with _run_batch's
        # frame; one still alive is the model's (a buffer of an output that did not fit in
        # the region may count too: that only costs a new region).
        if region is not None and any(ref() is not None for ref in kept):
            # The model kept an input (or a view of one) past execute: the next batch must
            # not overwrite it. The region is retired; the kept views keep its pages mapped
            # here, and the server makes a new region for the next batch.
            self.region = None
            reply["retire_region"] = True
        self.connection.send(reply, buffers)

    def _run_batch(self, header: Dict[str, Any], payload: memoryview,
                   region: Optional[wire.Region], kept: List[Any]
                   ) -> Tuple[Dict[str, Any], List[memoryview]]:
        """Run one batch; the reply and its payload buffers. Adds a weak reference to each
        input array that lives in ``region`` to ``kept``."""
        reply: Dict[str, Any] = {"op": "result", "id": header["id"]}
        try:
            if self.model is None:
                raise runner.BatchFailure("INTERNAL", "the worker has no model (no init)")
            requests = [_Request(message, region, payload) for message in header["requests"]]
            if region is not None:
                kept.extend(weakref.ref(owner) for owner in
                            (_region_array(tensor.data, region) for request in requests
                             for tensor in request.inputs.values()) if owner is not None)
            results = self.model.execute(requests)
            out = header.get("out")  # None: a batch that travels inside its messages
            packer = wire.Packer(region if out is not None else None, out or 0)
            reply["responses"] = [{
                "outputs": [packer.add(name, datatype, array) for name, datatype, array in outputs],
                "parameters": parameters,
                "error": error,
            } for outputs, parameters, error in results]
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


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: naiad_stub_main.py SOCKET_FD PARENT_PID (started by naiad)\n")
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(int(argv[2]))
    connection = wire.Connection(socket.socket(fileno=int(argv[1])))
    logging.getLogger().addHandler(_ForwardToServer(connection))
    Worker(connection).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
