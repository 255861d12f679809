"""``InferenceServer.stream`` and the models' own calls (``ServerModels``, what BLS uses), in
process: one path for ordinary and decoupled models, errors and cancellation ending a
stream, and the request counted in flight until its final response. The event loop runs on
a thread of its own, as in ``naiad serve``; the models are Python models (worker processes).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from loop_thread import loop_in_thread
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.errors import InferenceServerError, Status
from naiad.server import InferenceServer, ServerOptions
from naiad.types import (
    Cancellation,
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    Tensor,
)

WAIT_S = 30.0  # upper bound for anything that should happen; never a speed assertion

DECOUPLED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

# IN[0] responses from a thread of the model's own, after execute returned; a negative IN
# fails the batch; IN >= 1000 first waits IN - 1000 ms (the instance is busy meanwhile).
REPEAT_PY = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if count < 0:
                raise ValueError("negative count")
            if count >= 1000:
                time.sleep((count - 1000) / 1000)
                count = 1
            threading.Thread(target=self.send, args=(request, count)).start()
        return None

    def send(self, request, count):
        sender = request.get_response_sender()
        for i in range(count):
            time.sleep(0.002)
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([i], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with loop_in_thread() as loop:
        yield loop


@pytest.fixture(scope="module")
def server(tmp_path_factory, loop) -> Iterator[InferenceServer]:
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(repo, "repeat", DECOUPLED_CONFIG.format(name="repeat"), REPEAT_PY)
    server = InferenceServer(ServerOptions(model_repositories=[str(repo)]))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(WAIT_S * 2)
    yield server
    asyncio.run_coroutine_threadsafe(server.shutdown(WAIT_S), loop).result(WAIT_S * 2)


class Stream:
    """What ``on_response`` received, in order."""

    def __init__(self) -> None:
        self.responses: list[InferenceResponse | None] = []
        self.finals = 0
        self.done = threading.Event()

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        self.responses.append(response)
        if final:
            self.finals += 1
            self.done.set()

    def wait(self) -> list[InferenceResponse | None]:
        assert self.done.wait(WAIT_S), f"no final response, got {self.responses}"
        return self.responses


def repeat(count: int) -> InferenceRequest:
    data = np.array([count], np.int32)
    return InferenceRequest("repeat", -1, {"IN": Tensor("IN", "INT32", (1,), data)})


def add_sub() -> InferenceRequest:
    a = np.arange(4, dtype=np.float32)
    return InferenceRequest("add_sub", -1, {"INPUT0": Tensor("INPUT0", "FP32", (4,), a),
                                            "INPUT1": Tensor("INPUT1", "FP32", (4,), a)})


def wait_until_idle(server: InferenceServer) -> None:
    deadline = time.monotonic() + WAIT_S
    while server.in_flight:
        assert time.monotonic() < deadline, f"{server.in_flight} request(s) still in flight"
        time.sleep(0.005)


def test_an_ordinary_model_streams_its_one_response_pruned(server):
    stream = Stream()
    request = add_sub()
    request.requested_outputs = [RequestedOutput("OUTPUT1")]
    server.stream(server.model("add_sub"), request, stream)
    (response,) = stream.wait()
    assert response is not None and [t.name for t in response.outputs] == ["OUTPUT1"]
    assert stream.finals == 1
    wait_until_idle(server)


@pytest.mark.parametrize("count", [0, 1, 4])
def test_a_decoupled_model_streams_every_response_then_the_final_flag(server, count):
    stream = Stream()
    server.stream(server.model("repeat"), repeat(count), stream)
    responses = stream.wait()
    assert [int(r.outputs[0].data[0]) for r in responses if r is not None] == list(range(count))
    assert responses[-1] is None and stream.finals == 1
    wait_until_idle(server)


def test_a_decoupled_request_stays_in_flight_until_its_final_response(server):
    stream = Stream()
    gate = threading.Event()

    def held(response: InferenceResponse | None, final: bool) -> None:
        if final:  # hold the final delivery: the request has not left yet
            assert gate.wait(WAIT_S)
        stream(response, final)

    threading.Thread(target=server.stream,
                     args=(server.model("repeat"), repeat(2), held)).start()
    deadline = time.monotonic() + WAIT_S
    while len(stream.responses) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    assert server.in_flight == 1  # execute returned long ago; the stream is open
    gate.set()
    stream.wait()
    wait_until_idle(server)


def test_a_failed_execute_ends_the_stream_with_its_error(server):
    stream = Stream()
    server.stream(server.model("repeat"), repeat(-1), stream)
    (response,) = stream.wait()
    assert response is not None and response.error is not None
    assert "negative count" in response.error.message
    wait_until_idle(server)


def test_a_queued_decoupled_request_cancelled_never_runs(server):
    busy, queued = Stream(), Stream()
    model = server.model("repeat")
    server.stream(model, repeat(1000 + 300), busy)  # holds the one instance for 0.3 s
    request = repeat(3)
    request.cancellation = Cancellation()
    server.stream(model, request, queued)
    request.cancellation.cancel()
    (response,) = queued.wait()
    assert response is not None and response.error is not None
    assert response.error.status is Status.CANCELLED
    busy.wait()
    wait_until_idle(server)


# --- the models' own calls (BLS) --------------------------------------------------------


def test_models_call_others_through_the_server(server):
    calls = server.models.client
    assert calls is not None
    response = calls.infer(add_sub()).result(WAIT_S)
    assert response.error is None and len(response.outputs) == 2
    stream = Stream()
    calls.stream(repeat(2), stream)
    assert len(stream.wait()) == 3
    assert calls.is_ready("add_sub") and not calls.is_ready("missing")


def test_model_calls_answer_errors_as_responses(server):
    calls = server.models.client
    assert calls is not None
    missing = calls.infer(InferenceRequest("missing", -1, {})).result(WAIT_S)
    assert missing.error is not None and missing.error.status is Status.NOT_FOUND
    decoupled = calls.infer(repeat(1)).result(WAIT_S)
    assert decoupled.error is not None
    assert "Please use 'decoupled=True'" in decoupled.error.message
    bad = calls.infer(InferenceRequest("add_sub", -1, {})).result(WAIT_S)
    assert bad.error is not None and bad.error.status is Status.INVALID_ARG
    wait_until_idle(server)


def test_model_control_from_a_model_follows_the_control_mode(server):
    calls = server.models.client
    assert calls is not None
    # This server runs in "none" mode: Triton's refusal, as over the repository API.
    with pytest.raises(InferenceServerError, match="explicit model load / unload is not "
                                                   "allowed"):
        calls.load("add_sub").result(WAIT_S)
    with pytest.raises(InferenceServerError, match="not allowed"):
        calls.unload("add_sub").result(WAIT_S)
    assert calls.is_ready("add_sub")
