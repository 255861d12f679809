"""The server's side of a worker's calls (``stub/naiad_stub_calls.py``): BLS requests,
their cancellation, and model readiness.

Each BLS request becomes a server request (:func:`naiad_backend_python.calls.server_request`)
run through ``ModelContext.server``; every response goes back as an ``answer`` message
(the last one ``final``) with its tensors in the payload, or, from
``shm-inline-max-byte-size`` on, in a shared memory region of its own that the worker maps.
Messages are handled where the worker's answers are read (the server's event loop); answers
are sent from whichever thread the response arrives on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from naiad.errors import InferenceServerError
from naiad.types import Cancellation, InferenceClient, InferenceResponse
from naiad_backend_python.calls import response_parts, server_request, start_call
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")

#: ``send(header, buffers, fds)``: a message to the worker, from any thread, never blocking.
Send = Callable[..., None]
#: ``handler(message) -> answer or None``: a module's questions (custom metrics).
Handler = Callable[[dict], "dict | None"]


class ServerCalls:
    """Answers one worker's calls. ``handlers`` serve further ``op``s (each answer is sent
    back when the message asked a question: it carries a ``call`` number)."""

    def __init__(self, server: InferenceClient | None, send: Send, region_dir: str,
                 inline_max: int, handlers: dict[str, Handler] | None = None,
                 find_trace: Callable[[int], Any] | None = None) -> None:
        self.server = server
        # the trace of a request sent to this worker, by its id (None: gone or unknown)
        self.find_trace = find_trace
        self.send = send
        self.region_dir = region_dir
        self.inline_max = inline_max
        self.handlers = dict(handlers or {})
        # BLS requests in progress, by call number: cancelled on the worker's word.
        self._running: dict[int, Cancellation] = {}
        self._lock = threading.Lock()

    def handles(self, op: str) -> bool:
        return op in _OWN or op in self.handlers

    def handle(self, message: dict, payload: memoryview, fds: list[int]) -> None:
        op = message.get("op")
        if op == "infer":
            self._infer(message, payload, fds)
            return
        wire.close_fds(fds)
        number = message.get("call")
        if op == "cancel_call":
            with self._lock:
                cancellation = self._running.get(number)  # type: ignore[arg-type]
            if cancellation is not None:
                cancellation.cancel()
        elif op == "model_ready":
            ready = self.server is not None and self.server.is_ready(
                str(message.get("name", "")), _version(message.get("version")))
            self._answer(number, {"ready": ready})
        elif op in ("load_model", "unload_model"):
            self._control(number, message, payload)
        else:
            try:
                answer = self.handlers[str(op)](message)
            except Exception as exc:  # a handler's bug: the model must not wait forever
                log.exception("a worker's %r message could not be handled", op)
                answer = {"error": f"the server could not handle it: "
                                   f"{type(exc).__name__}: {exc}"}
            if number is not None:
                self._answer(number, answer or {})

    def _control(self, number: Any, message: dict, payload: memoryview) -> None:
        """Load or unload a model (on the loop, where model control runs); the answer
        goes when it is done, without holding the loop meanwhile."""
        name = str(message.get("name", ""))
        if self.server is None:
            self._answer(number, {"error": f"{message['op']} needs a server"})
            return
        if message["op"] == "load_model":
            try:
                files = _load_files(message.get("files") or (), payload)
            except (TypeError, ValueError) as exc:
                self._answer(number, {"error": f"failed to load '{name}': the worker's "
                                               f"files could not be read: {exc}"})
                return
            done = self.server.load(name, str(message.get("config") or ""), files or None)
        else:
            done = self.server.unload(name, bool(message.get("unload_dependents")))

        def answer(control: Future[None]) -> None:
            try:
                control.result()
            except InferenceServerError as exc:
                self._answer(number, {"error": exc.message})
            else:
                self._answer(number, {"error": None})

        done.add_done_callback(answer)

    def _infer(self, message: dict, payload: memoryview, fds: list[int]) -> None:
        number = int(message["call"])
        try:
            region = wire.open_region(message, fds)
            inputs = [wire.unpack(descriptor, region, payload, copy=False)
                      for descriptor in message.get("inputs", ())]
            request = server_request(message["request"], inputs, self.find_trace)
        except (KeyError, TypeError, ValueError) as exc:
            self._answer(number, {"final": True, "response": {"error": [
                "INVALID_ARG", f"the BLS request could not be read: {exc}"]}})
            return
        cancellation = request.cancellation
        assert cancellation is not None
        with self._lock:
            self._running[number] = cancellation

        def on_response(response: InferenceResponse | None, final: bool) -> None:
            if final:
                with self._lock:
                    self._running.pop(number, None)
            self._respond(number, response, final)

        start_call(self.server, request, bool(message.get("decoupled")), on_response)

    def _respond(self, number: int, response: InferenceResponse | None, final: bool) -> None:
        outputs, parameters, error = response_parts(response)
        body: dict[str, Any] | None = None
        buffers: list[memoryview] = []
        fds: list[int] = []
        header: dict[str, Any] = {"final": final}
        if response is not None:
            descriptors, buffers, fds, region_size = wire.pack_tensors(
                outputs, self.region_dir, self.inline_max)
            if region_size:
                header["region_size"] = region_size
            body = {"outputs": descriptors, "parameters": parameters,
                    "error": list(error) if error else None}
        header["response"] = body
        try:
            self._answer(number, header, buffers, fds)
        finally:
            wire.close_fds(fds)

    def _answer(self, number: Any, body: dict, buffers: Any = (), fds: Any = ()) -> None:
        try:
            self.send({**body, "op": "answer", "call": number}, buffers, fds)
        except (wire.PeerGone, OSError):
            pass  # the worker ended: nobody waits for this answer

    def cancel_all(self) -> None:
        """The worker ended: its BLS requests still running are of no use."""
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for cancellation in running:
            cancellation.cancel()


def _load_files(entries: Any, payload: memoryview) -> dict[str, bytes]:
    """A ``load_model`` message's files: its ``[name, size]`` pairs, the contents one after
    the other in the payload."""
    files: dict[str, bytes] = {}
    offset = 0
    for name, size in entries:
        if not isinstance(name, str) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a file entry is [name, size], got {[name, size]!r}")
        if offset + size > len(payload):
            raise ValueError(f"file {name!r} ends past the message ({len(payload)} bytes)")
        files[name] = bytes(payload[offset:offset + size])
        offset += size
    return files


_OWN = frozenset({"infer", "cancel_call", "model_ready", "load_model", "unload_model"})


def _version(value: Any) -> int:
    try:
        return int(value) if value not in (None, "") else -1
    except (TypeError, ValueError):
        return -1
