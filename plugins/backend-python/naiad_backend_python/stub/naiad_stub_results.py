"""A Python model's responses and failures as plain results: what ``execute`` returned or
sent, checked against Triton's execute contract (with Triton's error texts), the outputs a
request did not ask for pruned, BYTES outputs as ``bytes`` objects; and the one error a
failed batch gets. Both execution modes carry these results on: the worker as messages,
the in-process instance as naiad's responses (``naiad_backend_python.responses``).

Standard library and numpy only (a model's environment brings any Python 3.9 or newer).
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from naiad_stub_errors import TritonError
from naiad_stub_requests import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceResponse,
    _OutputTypeError,
)
from naiad_stub_tensor import Tensor

# pb_utils.TritonError codes -> naiad status names (as Triton maps them: UNKNOWN is gRPC
# UNKNOWN, HTTP 500). A TritonError made without a code is INTERNAL: tritonserver 2.51
# answers it with HTTP 500.
ERROR_STATUS = {
    TritonError.UNKNOWN: "UNKNOWN",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARG",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}

# An exception raised by execute fails every request of the batch. tritonserver 2.51 answers
# 500 / INTERNAL; naiad answers 400 / INVALID_ARGUMENT because what a model raises on is most
# often the request it was given, and a 5xx invites retries that cannot succeed.
EXECUTE_FAILURE_STATUS = "INVALID_ARG"
# A model that breaks the execute contract (not a list, the wrong number of responses, not
# an InferenceResponse) is broken whatever the input: 500 / INTERNAL, as in Triton.
CONTRACT_FAILURE_STATUS = "INTERNAL"

_STUB_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep

_PbResponse = InferenceResponse
_PbTensor = Tensor
_RESCHEDULE = TRITONSERVER_REQUEST_RELEASE_RESCHEDULE

#: One output: (name, V2 datatype, array).
Output = Tuple[str, str, np.ndarray]
#: One response: its outputs, its parameters (or None), and (status name, message) when the
#: model answered this request with an error.
Result = Tuple[List[Output], Optional[Dict[str, Any]], Optional[Tuple[str, str]]]
#: What ``execute`` gives each request of a decoupled model: its responses went out
#: through ``emit`` (see ``naiad_stub_runner.ModelRunner``).
NO_RESULT: Result = ([], None, None)
#: ``emit(request, result, final)``: one response of a decoupled model's request (result
#: None: the final flag alone), from whichever thread the model sends it on.
Emit = Callable[[Any, Optional[Result], bool], None]
#: What ``execute`` gives a request of an ordinary model that execute returned None for and
#: whose response was not sent yet: it leaves later, through ``emit``
#: (``naiad_stub_runner._Late``).
#: Compared by identity.
DEFERRED: Result = ([], None, None)
#: A request the model rescheduled (until it runs again). Compared by identity.
RESCHEDULED: Result = ([], None, None)


class BatchFailure(Exception):
    """``execute`` failed as a whole: every request of the batch gets this error."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ContractError(Exception):
    """The model broke the execute contract (its message is Triton's, without a type)."""


def describe(exc: BaseException) -> str:
    """``Type: message`` and the model's frames, innermost first, as Triton shows errors
    raised in Python models (``At:`` lines of ``file(line): function``)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith(_STUB_FILES)]
    text = f"{type(exc).__name__}: {exc}"
    if frames:
        text += "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n"
                                      for f in reversed(frames))
    return text


def result_of(response: Any, request: Any, pb_request: Any, output_names: frozenset[str]
              ) -> Result:
    """The plain result of a model's response to ``request`` (``response`` None: the one
    its response sender sent during execute), the outputs the request did not ask for
    pruned. Raises :class:`ContractError` for what is not Triton's response."""
    if type(response) is not _PbResponse:
        if response is None:
            response = _sent_response(pb_request)
        elif not isinstance(response, _PbResponse):
            raise ContractError("Expected an 'InferenceResponse' object in the execute "
                                 f"function return list, found type '{type(response)}'.")
    error = response._error
    if error is not None:
        return [], None, (ERROR_STATUS.get(error.code(), "INTERNAL"), error.message())
    requested = request.requested_outputs
    # Triton prunes what the request did not ask for (all of the config's outputs when
    # it names none); a config without outputs prunes nothing.
    wanted = output_names if requested is None else {o.name for o in requested}
    outputs = []
    for tensor in response._output_tensors:
        if type(tensor) is not _PbTensor:
            raise ContractError("Expected a 'Tensor' object in the output_tensors of an "
                                 f"InferenceResponse, found type '{type(tensor)}'.")
        name = tensor._name
        if wanted and name not in wanted:
            continue
        array = tensor._array
        datatype = tensor._datatype
        if datatype == "BYTES":
            array = _bytes_array(array)
        outputs.append((name, datatype, array))
    parameters = response._parameters
    return outputs, (dict(parameters) if parameters else None), None


def batch_failure(exc: Exception, instance_name: str) -> BatchFailure:
    """The error every request of a failed batch gets (Triton's wording)."""
    status = EXECUTE_FAILURE_STATUS
    if isinstance(exc, (ContractError, _OutputTypeError)):
        detail = str(exc)
        status = CONTRACT_FAILURE_STATUS
    else:
        detail = describe(exc)
        if isinstance(exc, TritonError):
            status = ERROR_STATUS.get(exc.code(), status)
    return BatchFailure(status, f"Failed to process the request(s) for model "
                                f"'{instance_name}', message: {detail}")


def _check_rescheduled(returned: list[Any], pb_requests: list[Any]) -> None:
    """Triton's rule: execute returns None for a request it rescheduled."""
    for response, pb_request in zip(returned, pb_requests):
        if response is not None and getattr(pb_request, "_release", 1) == _RESCHEDULE:
            raise ContractError("Expected a None object in the execute function return list "
                                 "for reschduled request, found type "
                                 f"'{type(response)}'.")


def _sent_response(request: Any) -> Any:
    sender = request._sender
    if sender is None or sender._response is None:
        raise ContractError("Expected an 'InferenceResponse' object in the execute function "
                             "return list, found type '<class 'NoneType'>'.")
    return sender._response


def _bytes_array(array: np.ndarray) -> np.ndarray:
    """A BYTES output as an object array of ``bytes`` (str items are UTF-8 encoded, other
    objects ``str()``-ed, as Triton serializes them). Returns ``array`` itself when it
    already is one."""
    if array.dtype == np.object_:
        for item in array.flat:
            if type(item) is not bytes:
                break
        else:
            return array
        out = np.empty(array.shape, dtype=object)
        out.flat[:] = [item if type(item) is bytes else
                       item.encode("utf-8") if isinstance(item, str) else
                       bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else
                       str(item).encode("utf-8")
                       for item in array.flat]
        return out
    return array.astype(object)  # np.bytes_ ("S") array: its items become bytes
