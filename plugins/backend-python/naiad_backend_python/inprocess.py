"""In-process execution (``EXECUTION_MODE: in_process``): the model runs on its instance's
thread inside the server.

The fast path for trusted numpy code: no process hop and no copy of any tensor (requests
reach ``execute`` as views of the request bytes, outputs leave as the model's arrays). The
price: a crash in the model ends the server, instances share one GIL (pure-Python work does
not scale with ``count``), and the model imports from the server's environment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from naiad.errors import InferenceServerError, unavailable
from naiad.types import (
    InferenceClient,
    InferenceRequest,
    InferenceResponse,
    ModelInstance,
    Tensor,
)
from naiad_backend_python.calls import InProcessCalls
from naiad_backend_python.responses import model_response, status_named
from naiad_backend_python.stub import naiad_stub_runner as runner
from naiad_backend_python.stub import triton_python_backend_utils as pb_utils

log = logging.getLogger("naiad.backend.python")


class InProcessInstance(ModelInstance):
    """One ``TritonPythonModel`` object in the server's interpreter."""

    __slots__ = ("model_name", "runner")

    def __init__(self, model_file: str, args: dict[str, str], output_names: Sequence[str],
                 server: InferenceClient | None = None) -> None:
        """Import the model and run ``initialize``. Raises UNAVAILABLE when either fails.
        ``server``: the server's models, for the model's BLS calls."""
        self.model_name = args["model_name"]
        # One server per process: every in-process model calls through the same one.
        pb_utils._set_model_calls(InProcessCalls(server))
        try:
            self.runner = runner.ModelRunner(model_file, args, output_names, emit=_emit)
        except runner.LoadFailure as exc:
            raise unavailable(str(exc)) from exc

    @property
    def model(self) -> object:
        """The ``TritonPythonModel`` object."""
        return self.runner.model

    @property
    def module(self) -> object:
        """The module model.py was imported as."""
        return self.runner.module

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        try:
            results = self.runner.execute(requests)
        except runner.BatchFailure as exc:
            # A failed batch is raised, not answered: the core counts it as a failure.
            log.error("%s", exc.message)
            raise InferenceServerError(exc.message, status_named(exc.status)) from None
        return [_response(result) for result in results]

    def close(self) -> None:
        error = self.runner.finalize()
        if error is not None:  # Triton logs a failing finalize and carries on
            log.error("model '%s' instance '%s': finalize failed: %s", self.model_name,
                      self.runner.instance_name, error)


def _response(result: runner.Result) -> InferenceResponse:
    outputs, parameters, error = result
    return model_response([Tensor(name, datatype, array.shape, array)
                           for name, datatype, array in outputs], parameters, error)


def _emit(request: InferenceRequest, result: runner.Result | None, final: bool) -> None:
    """A decoupled model's response, on its way to the client (dropped for a request that
    has no client: warmup)."""
    sender = request.sender
    if sender is None:
        return
    try:
        sender.send(None if result is None else _response(result), final)
    except RuntimeError as exc:  # sent after the final one (the server ended the stream)
        raise pb_utils.TritonModelException(
            "Unable to send response. Response sender has been closed.") from exc
