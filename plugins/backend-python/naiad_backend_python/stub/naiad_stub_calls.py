"""A worker's calls to the server: questions with answers, and the model's BLS requests.

Any thread of the model may call (``execute``, threads it starts, an ``async def
execute``'s loop); the worker's reader thread routes each ``answer`` message to the call
that waits for it, by the ``call`` number the question carried. The server's side is
``naiad_backend_python.isolated.calls``.

Messages to the server:

- ``infer``: a BLS request (``request``: the fields of ``pb_utils._describe_call``;
  ``inputs``: tensor descriptors; ``decoupled``) -> ``answer`` messages, one per response,
  the last with ``final`` true;
- ``cancel_call``: the model cancelled a BLS call (``ResponseIterator.cancel``);
- ``model_ready``: ``name``, ``version`` -> ``answer`` with ``ready``;
- ``load_model`` (``name``, ``config``, ``files``: ``[name, size]`` pairs, the contents in
  the payload in that order) and ``unload_model`` (``name``, ``unload_dependents``) ->
  ``answer`` with ``error`` (None when it worked);
- any other question a module of the worker asks through :func:`request` (custom metrics).

Only the standard library and numpy: this runs in the model's own Python.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import naiad_stub_wire as wire
import triton_python_backend_utils as pb_utils

#: ``on_answer(header, payload, fds)``: one answer to a call (on the reader thread).
OnAnswer = Callable[[Dict[str, Any], memoryview, List[int]], None]

#: This worker's link to the server, once the model's ``init`` message came: what the
#: worker's other modules (custom metrics) ask and tell the server through.
link: Optional[ServerLink] = None


class ServerLink:
    """The worker's end of its calls to the server."""

    def __init__(self, connection: wire.Connection, region_dir: str, inline_max: int,
                 on_ask: Callable[[], None] = lambda: None) -> None:
        self.connection = connection
        # Called before each question: the worker makes sure someone reads the answer.
        self.on_ask = on_ask
        # Where tensors of at least ``inline_max`` bytes are put for the server to map.
        self.region_dir = region_dir
        self.inline_max = inline_max
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: Dict[int, OnAnswer] = {}

    def post(self, header: Dict[str, Any], buffers: Any = (), fds: Any = ()) -> None:
        """Send a message that has no answer."""
        self.connection.send(header, buffers, fds)

    def ask(self, header: Dict[str, Any], on_answer: OnAnswer, buffers: Any = (),
            fds: Any = ()) -> int:
        """Send a question; ``on_answer`` gets each answer until one is ``final`` (or the
        only one, for questions that have one answer). Returns the call's number."""
        with self._lock:
            number = next(self._numbers)
            self._waiting[number] = on_answer
        self.on_ask()
        self.connection.send(dict(header, call=number), buffers, fds)
        return number

    def request(self, header: Dict[str, Any], buffers: Any = ()) -> Dict[str, Any]:
        """Send a question (its payload: ``buffers``) and wait for its one answer (from any
        thread but the reader)."""
        answered = threading.Event()
        box: List[Dict[str, Any]] = []

        def on_answer(answer: Dict[str, Any], payload: memoryview, fds: List[int]) -> None:
            box.append(answer)
            answered.set()

        self.ask(header, on_answer, buffers)
        answered.wait()
        return box[0]

    def answered(self, header: Dict[str, Any], payload: memoryview, fds: List[int]) -> None:
        """An ``answer`` message (on the reader thread): hand it to its call."""
        number = header.get("call")
        with self._lock:
            # Answers without "final" are the only answer of their question.
            on_answer = (self._waiting.get(number) if header.get("final") is False  # type: ignore[arg-type]
                         else self._waiting.pop(number, None))  # type: ignore[arg-type]
        if on_answer is None:
            wire.close_fds(fds)
            return
        on_answer(header, payload, fds)


class WorkerCalls(pb_utils._ModelCalls):
    """BLS from a worker: requests go to the server as messages, tensors of at least
    ``shm-inline-max-byte-size`` through a shared memory region of their own, both ways."""

    def __init__(self, link: ServerLink) -> None:
        self.link = link

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool,
              on_response: Callable[[pb_utils.InferenceResponse, bool], None]
              ) -> Callable[[], None]:
        link = self.link
        descriptors, buffers, fds, region_size = wire.pack_tensors(
            [(t._name, t._datatype, t._array) for t in request.inputs()], link.region_dir,
            link.inline_max)
        header: Dict[str, Any] = {"op": "infer", "decoupled": decoupled,
                                  "request": pb_utils._describe_call(request),
                                  "inputs": descriptors}
        if region_size:
            header["region_size"] = region_size

        def on_answer(answer: Dict[str, Any], payload: memoryview, fds: List[int]) -> None:
            on_response(_response(answer, payload, fds), bool(answer.get("final", True)))

        try:
            number = link.ask(header, on_answer, buffers, fds)
        finally:
            wire.close_fds(fds)
        return lambda: link.post({"op": "cancel_call", "call": number})

    def is_model_ready(self, model_name: str, model_version: str) -> bool:
        answer = self.link.request({"op": "model_ready", "name": model_name,
                                    "version": model_version})
        return bool(answer.get("ready"))

    def load_model(self, model_name: str, config: str, files: Optional[Dict[str, bytes]]
                   ) -> Optional[str]:
        # The files' contents follow the header, in the order of its (name, size) pairs.
        contents = list((files or {}).items())
        answer = self.link.request(
            {"op": "load_model", "name": model_name, "config": config,
             "files": [[key, len(content)] for key, content in contents]},
            [memoryview(content) for _, content in contents])
        return answer.get("error")

    def unload_model(self, model_name: str, unload_dependents: bool) -> Optional[str]:
        answer = self.link.request({"op": "unload_model", "name": model_name,
                                    "unload_dependents": unload_dependents})
        return answer.get("error")


def _response(answer: Dict[str, Any], payload: memoryview, fds: List[int]
              ) -> pb_utils.InferenceResponse:
    """The model's view of one answer to a BLS request (outputs are views of the payload
    or of the answer's region: no copy)."""
    region = wire.open_region(answer, fds)
    body: Optional[Dict[str, Any]] = answer.get("response")
    if body is None:  # the final flag alone
        return pb_utils.InferenceResponse()
    error: Optional[Tuple[str, str]] = body.get("error")
    if error is not None:
        return pb_utils._call_response((), None, (error[0], error[1]))
    outputs = [wire.unpack(descriptor, region, payload, copy=False)
               for descriptor in body.get("outputs", ())]
    return pb_utils._call_response(outputs, body.get("parameters"), None)
