"""A Python model's calls to the server's other models (BLS), made in the server.

In-process models call through :class:`InProcessCalls` (installed in ``pb_utils``); a
worker process sends its calls as messages, which :mod:`naiad_backend_python.isolated.calls`
turns into the same server requests with :func:`server_request`. Both end at
:class:`naiad.types.InferenceClient` (``ModelContext.server``): BLS reaches every model
the server serves, with the checks a client's request gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from naiad.errors import InferenceServerError
from naiad.types import (
    Cancellation,
    InferenceClient,
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    Tensor,
)
from naiad_backend_python.responses import Wired
from naiad_backend_python.stub import triton_python_backend_utils as pb_utils


def server_request(call: dict[str, Any], inputs: Iterable[Wired],
                   find_trace: Callable[[int], Any] | None = None) -> InferenceRequest:
    """The server's request for a BLS call (``pb_utils._describe_call``'s fields). A call
    made with a traced request's trace (``trace``: that trace, or its id from a worker,
    which ``find_trace`` looks up) carries it in ``request.trace``: the server traces the
    call as its child (``InferenceClient.infer``)."""
    outputs = call.get("outputs")
    request = InferenceRequest(
        model_name=str(call["model_name"]), model_version=int(call.get("model_version", -1)),
        inputs={name: Tensor(name, datatype, array.shape, array)
                for name, datatype, array in inputs},
        id=str(call.get("id", "")),
        requested_outputs=None if outputs is None else [RequestedOutput(n) for n in outputs],
        parameters=dict(call.get("parameters") or {}))
    request.cancellation = Cancellation()
    trace = call.get("trace")
    if isinstance(trace, int):
        trace = find_trace(trace) if find_trace is not None else None
    request.trace = trace
    return request


def response_parts(response: InferenceResponse | None
                   ) -> tuple[list[Wired], dict[str, Any] | None, tuple[str, str] | None]:
    """(outputs, parameters, (status, message) or None) of a response (None: empty)."""
    if response is None:
        return [], None, None
    error = response.error
    if error is not None:
        return [], None, (error.status.name, error.message)
    return ([(t.name, t.datatype, t.data) for t in response.outputs],
            response.parameters or None, None)


def start_call(server: InferenceClient | None, request: InferenceRequest, decoupled: bool,
               on_response: Callable[[InferenceResponse | None, bool], object]) -> None:
    """Run a BLS request: ``on_response(response, final)`` gets its responses."""
    if server is None:
        on_response(InferenceResponse(error=InferenceServerError(
            "BLS needs a server: this model was loaded outside one")), True)
        return
    if decoupled:
        server.stream(request, on_response)
        return
    server.infer(request).add_done_callback(lambda done: on_response(done.result(), True))


class InProcessCalls(pb_utils._ModelCalls):
    """BLS for in-process models: straight to the server's models, no copies."""

    def __init__(self, server: InferenceClient | None) -> None:
        self.server = server

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool,
              on_response: Callable[[pb_utils.InferenceResponse, bool], None]
              ) -> Callable[[], None]:
        call = pb_utils._describe_call(request)
        server_call = server_request(call, ((t._name, t._datatype, t._array)
                                            for t in request.inputs()))

        def answer(response: InferenceResponse | None, final: bool) -> None:
            on_response(pb_utils._call_response(*response_parts(response)), final)

        start_call(self.server, server_call, decoupled, answer)
        cancellation = server_call.cancellation
        assert cancellation is not None
        return cancellation.cancel

    def is_model_ready(self, model_name: str, model_version: str) -> bool:
        if self.server is None:
            return False
        return self.server.is_ready(model_name, int(model_version) if model_version else -1)

    def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None
                   ) -> str | None:
        if self.server is None:
            return "load_model needs a server: this model was loaded outside one"
        return failure_of(self.server.load(model_name, config, files))

    def unload_model(self, model_name: str, unload_dependents: bool) -> str | None:
        if self.server is None:
            return "unload_model needs a server: this model was loaded outside one"
        return failure_of(self.server.unload(model_name, unload_dependents))


def failure_of(control: Future[None]) -> str | None:
    """Wait for a model control call: None, or the message of its failure."""
    try:
        control.result()
    except InferenceServerError as exc:
        return exc.message
    return None
