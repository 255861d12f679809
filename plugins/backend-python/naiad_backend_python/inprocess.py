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

from naiad.errors import InferenceServerError, Status, unavailable
from naiad.types import InferenceRequest, InferenceResponse, ModelInstance, Tensor
from naiad_backend_python.stub import naiad_stub_runner as runner

log = logging.getLogger("naiad.backend.python")
_Response = InferenceResponse


class InProcessInstance(ModelInstance):
    """One ``TritonPythonModel`` object in the server's interpreter."""

    __slots__ = ("model_name", "runner")

    def __init__(self, model_file: str, args: dict[str, str], output_names: Sequence[str]
                 ) -> None:
        """Import the model and run ``initialize``. Raises UNAVAILABLE when either fails."""
        self.model_name = args["model_name"]
        try:
            self.runner = runner.ModelRunner(model_file, args, output_names)
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
            raise InferenceServerError(exc.message, Status[exc.status]) from None
        responses = []
        for outputs, parameters, error in results:
            if error is not None:
                responses.append(_Response(error=InferenceServerError(error[1],
                                                                      Status[error[0]])))
                continue
            tensors = [Tensor(name, datatype, array.shape, array)
                       for name, datatype, array in outputs]
            responses.append(_Response(outputs=tensors, parameters=parameters)
                             if parameters else _Response(outputs=tensors))
        return responses

    def close(self) -> None:
        error = self.runner.finalize()
        if error is not None:  # Triton logs a failing finalize and carries on
            log.error("model '%s' instance '%s': finalize failed: %s", self.model_name,
                      self.runner.instance_name, error)

