"""An ordinary (non-decoupled) model's response sender, as Triton 2.51 allows it: the one
response and the final flag apart, during ``execute`` or after it returned None for the
request (qa/L0_backend_python/response_sender runs the same cases through a server)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from backend_python_helpers import add_sub_request

from naiad.errors import InferenceServerError, Status

# The model reads its instructions from the request's id: "<when>:<value>", where <when> is
# "return" (execute returns the response), "before" (sent during execute, final flag
# apart), "after" (sent by a thread after execute returned None, final flag apart),
# "twice" (sent during execute, then a second one: Triton's error fails the batch, the sent
# response stays) or "never" (the thread sends only the final flag: Triton's error, and
# naiad answers the request with an error instead of leaving it waiting).
SENDER_PY = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def response(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                                                       np.full(4, value, np.float32))])


def later(sender, value):
    time.sleep(0.2)
    try:
        if value is not None:
            sender.send(response(value))
        sender.send(flags=FINAL)
    except pb_utils.TritonModelException as exc:
        pb_utils.Logger.log_warn(f"late send: {exc}")


class TritonPythonModel:
    def execute(self, requests):
        returned = []
        for request in requests:
            when, value = request.request_id().split(":")
            value = float(value)
            if when == "return":
                returned.append(response(value))
                continue
            sender = request.get_response_sender()
            returned.append(None)
            if when == "before":
                sender.send(response(value))
                sender.send(flags=FINAL)
            elif when == "twice":
                sender.send(response(value))
                sender.send(response(value + 1))
            else:
                threading.Thread(target=later, args=(
                    sender, value if when == "after" else None), daemon=True).start()
        return None if all(r is None for r in returned) else returned
"""

isolated_only = pytest.mark.parametrize("execution_mode", ["isolated"])


def _value(response) -> float:
    assert response.error is None, response.error
    return float(response.outputs[0].data[0])


@isolated_only
def test_responses_sent_apart_from_the_final_flag_and_after_execute_returned(load):
    """One worker, every way of answering (a worker start is the test's cost)."""
    instance = load("sender", SENDER_PY)
    started = time.monotonic()
    [response] = instance.execute([add_sub_request(id="after:7")])
    assert _value(response) == 7
    assert time.monotonic() - started >= 0.2  # it came with the thread's send
    [response] = instance.execute([add_sub_request(id="before:3")])
    assert _value(response) == 3
    responses = instance.execute([add_sub_request(id="return:1"),
                                  add_sub_request(id="before:2"),
                                  add_sub_request(id="after:3")])
    assert [_value(r) for r in responses] == [1, 2, 3]
    assert instance.in_flight == 0  # the late batch is not in flight any more
    # a final flag without a response after execute: Triton's error in the model, and the
    # request, let go of unanswered, gets an error instead of waiting forever
    [response] = instance.execute([add_sub_request(id="never:0")])
    assert response.error is not None and response.error.status is Status.INTERNAL
    assert "without sending its response" in response.error.message
    [again] = instance.execute([add_sub_request(id="return:4")])
    assert _value(again) == 4


def test_a_second_response_fails_the_batch_but_the_first_was_sent(load):
    instance = load("sender", SENDER_PY)
    first, other = instance.execute([add_sub_request(id="twice:5"),
                                     add_sub_request(id="return:6")])
    assert _value(first) == 5  # sent before the error: it stands
    assert other.error is not None
    assert "cannot send more than one response" in other.error.message


@pytest.mark.parametrize("execution_mode", ["in_process"])
def test_in_process_a_late_response_is_refused_where_it_is_used(load):
    instance = load("sender", SENDER_PY)
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request(id="after:1")])
    assert "in-process model cannot send a request's response after execute" in (
        info.value.message)


@isolated_only
def test_a_worker_that_dies_before_the_late_response_fails_the_request(load):
    instance = load("sender", SENDER_PY)
    results: list[object] = []
    instance.execute_async([add_sub_request(id="after:1")], results.append)
    time.sleep(0.05)  # execute returned; the thread sleeps before it sends
    os.kill(instance.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not results and time.monotonic() < deadline:
        time.sleep(0.02)
    [result] = results
    if isinstance(result, InferenceServerError):  # killed before the result went out
        assert result.status is Status.UNAVAILABLE
        return
    [response] = result  # type: ignore[misc]
    assert response.error is not None and response.error.status is Status.UNAVAILABLE
    assert "ended before the model sent the response" in response.error.message
