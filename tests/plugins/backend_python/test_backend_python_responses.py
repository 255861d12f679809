"""naiad_backend_python.responses: one conversion of a Python model's answer into naiad's
response, used by the in-process instance and by the worker channel alike."""

from __future__ import annotations

import numpy as np

from naiad.errors import Status
from naiad.types import Tensor
from naiad_backend_python import inprocess
from naiad_backend_python.responses import model_response, status_named


def test_an_unknown_status_name_is_internal_a_known_one_is_kept():
    assert status_named("NOT_FOUND") is Status.NOT_FOUND
    assert status_named("NO_SUCH_STATUS") is Status.INTERNAL
    response = model_response([], None, ("NO_SUCH_STATUS", "boom"))
    assert response.error is not None
    assert response.error.status is Status.INTERNAL and response.error.message == "boom"


def test_outputs_and_parameters_reach_the_response():
    array = np.arange(3, dtype=np.int32)
    tensor = Tensor("OUT", "INT32", array.shape, array)
    response = model_response([tensor], {"key": 1}, None)
    assert response.error is None and response.outputs == [tensor]
    assert response.parameters == {"key": 1}
    assert model_response([tensor], None, None).parameters == {}


def test_the_in_process_path_answers_an_unknown_status_as_the_worker_path_does():
    # Before, in-process raised KeyError here while a worker's answer became INTERNAL.
    response = inprocess._response(([], None, ("NO_SUCH_STATUS", "boom")))
    assert response.error is not None and response.error.status is Status.INTERNAL
    array = np.ones((2, 2), dtype=np.float32)
    response = inprocess._response(([("OUT", "FP32", array)], None, None))
    [tensor] = response.outputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("OUT", "FP32", (2, 2))
    assert tensor.data is array  # in-process: no copy
