"""A Python model's answer as naiad's response: the one conversion both execution modes
use, so that an in-process model and a worker process answer alike (the same status for
an unknown status name, the same parameters rule).

The model's side (``naiad_stub_runner``) turns what ``execute`` returned or sent into plain
parts: (name, V2 datatype, array) outputs, the response's parameters and (status name,
message) when the model answered with an error. In-process those parts arrive as they are;
a worker sends them as a message whose tensors the channel unpacks first. Each path makes
naiad's tensors of its outputs and hands them to :func:`model_response`. The opposite way
(a BLS call's response as the model sees it) is ``pb_utils._call_response``, used by both
modes as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from naiad.errors import InferenceServerError, Status
from naiad.types import InferenceResponse, Tensor

#: One tensor as it travels: (name, V2 datatype, array).
Wired = tuple[str, str, np.ndarray]


def status_named(name: str) -> Status:
    """The status a model's error names; INTERNAL for a name naiad does not know (a worker
    of another version, a model that built the message itself), as Triton answers an error
    it cannot place."""
    try:
        return Status[name]
    except KeyError:
        return Status.INTERNAL


def model_response(outputs: list[Tensor], parameters: dict[str, Any] | None,
                   error: tuple[str, str] | list[str] | None) -> InferenceResponse:
    """naiad's response from a model's answer: its error (status name, message), or its
    output tensors with the parameters it set (none: the response's own empty dict).

    The tensors come made (each path makes them from its parts in its own loop): a
    generator of parts here cost the worker's path 10-40% of its conversion time."""
    if error is not None:
        return InferenceResponse(error=InferenceServerError(error[1], status_named(error[0])))
    if parameters:
        return InferenceResponse(outputs=outputs, parameters=parameters)
    return InferenceResponse(outputs=outputs)
