"""Request rescheduling (``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``)
as Triton's iterative sequences use it: a rescheduled request runs again on the same
instance before its next batch, until the model releases it (qa/L0_backend_python's
request_rescheduling runs Triton's models through a server)."""

from __future__ import annotations

import numpy as np
import pytest
from backend_python_helpers import add_sub_request, request
from test_backend_python_decoupled import Collected

from naiad.errors import InferenceServerError
from naiad.types import ResponseSender

# Reschedules each request until it ran as many times as its INPUT0[0] says; answers with
# the count in OUTPUT0.
COUNTING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.request_id()
            self.runs[key] = self.runs.get(key, 0) + 1
            wanted = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            if self.runs[key] < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                out = np.full(4, self.runs.pop(key), np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out),
                                                             pb_utils.Tensor("OUTPUT1", out)]))
        return responses
"""

WRONG_RETURN_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""

# Triton's qa/python_models/iterative_sequence, shortened: IN responses counting down, the
# request rescheduled after each but the last.
ITERATIVE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.remaining = None

    def execute(self, requests):
        for request in requests:
            if self.remaining is None:
                self.remaining = int(pb_utils.get_input_tensor_by_name(request, "IN")
                                     .as_numpy()[0])
            sender = request.get_response_sender()
            self.remaining -= 1
            response = pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([self.remaining], np.int32))])
            if self.remaining <= 0:
                self.remaining = None
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
"""
ITERATIVE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { iterative_sequence: true }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _runs(value: float, id: str):
    req = add_sub_request(id=id)
    req.inputs["INPUT0"].data[:] = value
    return req


def test_a_rescheduled_request_runs_again_until_released(load):
    instance = load("counting", COUNTING_PY)
    responses = instance.execute([_runs(3, "a"), _runs(1, "b"), _runs(2, "c")])
    assert [int(r.outputs[0].data[0]) for r in responses] == [3, 1, 2]


def test_a_response_returned_for_a_rescheduled_request_fails_as_in_triton(load):
    instance = load("wrong_return", WRONG_RETURN_PY)
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request()])
    assert ("Expected a None object in the execute function return list for reschduled "
            "request") in info.value.message


def test_an_iterative_decoupled_model_streams_every_step(load):
    instance = load("iterative", ITERATIVE_PY, config=ITERATIVE_CONFIG)
    req = request("iterative", {"IN": np.array([3], np.int32)})
    collected = Collected()
    req.sender = ResponseSender(collected)
    instance.execute([req])
    responses = collected.wait()
    assert [int(r.outputs[0].data[0]) for r in responses if r is not None] == [2, 1, 0]
    assert collected.finals == 1
