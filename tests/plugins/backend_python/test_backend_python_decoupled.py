"""Decoupled models, cancellation and BLS in the Python backend, in both execution modes.

No server runs: responses are collected from a :class:`naiad.types.ResponseSender` set on
the request (the core sets one for every request to a decoupled model), and BLS calls reach
a small :class:`naiad.types.InferenceClient` defined here. The frontends' side of the same
features is tested end to end under tests/core.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
import pytest
from backend_python_helpers import request

from naiad.errors import InferenceServerError, Status
from naiad.types import (
    Cancellation,
    InferenceClient,
    InferenceRequest,
    InferenceResponse,
    ResponseCallback,
    ResponseSender,
    Tensor,
)

WAIT_S = 30.0

DECOUPLED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Sends IN[0] responses (0, 1, ...) from a thread of its own, after execute returned.
REPEAT_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=self.send, args=(request, count)).start()
        return None

    def send(self, request, count):
        sender = request.get_response_sender()
        for i in range(count):
            out = pb_utils.Tensor("OUT", np.array([i], np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


class Collected:
    """The responses of one request, as the core's sender delivers them."""

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
        assert self.done.wait(WAIT_S), f"no final response; got {self.responses}"
        return self.responses


def streamed(model: str, value: int) -> tuple[InferenceRequest, Collected]:
    req = request(model, {"IN": np.array([value], np.int32)})
    collected = Collected()
    req.sender = ResponseSender(collected)
    return req, collected


def outs(responses: list[InferenceResponse | None]) -> list[int]:
    return [int(r.outputs[0].data[0]) for r in responses if r is not None and r.outputs]


# --- decoupled models -------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 5])
def test_a_decoupled_model_sends_any_number_of_responses_after_execute(load, count):
    instance = load("repeat", REPEAT_PY, config=DECOUPLED_CONFIG)
    req, collected = streamed("repeat", count)
    assert instance.execute([req])[0].error is None
    responses = collected.wait()
    assert outs(responses) == list(range(count))
    assert responses[-1] is None  # the final flag alone
    assert collected.finals == 1


def test_each_request_of_a_batch_has_its_own_stream(load):
    instance = load("repeat", REPEAT_PY, config=DECOUPLED_CONFIG)
    (first, one), (second, two) = streamed("repeat", 2), streamed("repeat", 3)
    instance.execute([first, second])
    assert outs(one.wait()) == [0, 1]
    assert outs(two.wait()) == [0, 1, 2]


def test_error_responses_travel_in_the_stream(load):
    instance = load("errs", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    sender = request.get_response_sender()
                    out = pb_utils.Tensor("OUT", np.array([7], np.int32))
                    sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        "bad step", pb_utils.TritonError.INVALID_ARG)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    try:
                        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    except pb_utils.TritonModelException as exc:
                        pb_utils.Logger.log_info(f"second final refused: {exc}")
                    else:
                        raise AssertionError("a second final response was accepted")
                return None
    """, config=DECOUPLED_CONFIG)
    req, collected = streamed("errs", 1)
    assert instance.execute([req])[0].error is None
    first, last = collected.wait()
    assert first is not None and outs([first]) == [7]
    assert last is not None and last.error is not None
    assert last.error.status is Status.INVALID_ARG and "bad step" in last.error.message


def test_a_decoupled_execute_must_return_none(load):
    instance = load("returns", """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse() for _ in requests]
    """, config=DECOUPLED_CONFIG)
    req, _ = streamed("returns", 1)
    with pytest.raises(InferenceServerError, match="is using the decoupled mode and the "
                                                   "execute function must return None") as info:
        instance.execute([req])
    assert info.value.status is Status.INTERNAL


def test_a_decoupled_model_that_raises_fails_the_batch(load):
    instance = load("raises", """
        class TritonPythonModel:
            def execute(self, requests):
                raise ValueError("no stream today")
    """, config=DECOUPLED_CONFIG)
    req, _ = streamed("raises", 1)
    # The core ends the request's stream with this error (server.stream).
    with pytest.raises(InferenceServerError, match="no stream today"):
        instance.execute([req])


def test_async_execute_of_a_decoupled_model(load):
    instance = load("async_repeat", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                for request in requests:
                    sender = request.get_response_sender()
                    for i in range(3):
                        out = pb_utils.Tensor("OUT", np.array([i * 10], np.int32))
                        sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    """, config=DECOUPLED_CONFIG)
    req, collected = streamed("async_repeat", 0)
    instance.execute([req])
    assert outs(collected.wait()) == [0, 10, 20]


# --- cancellation -----------------------------------------------------------------------

UNTIL_CANCELLED_PY = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.stream, args=(request,)).start()
        return None

    def stream(self, request):
        sender = request.get_response_sender()
        sent = 0
        # Bounded: a model that never saw the cancellation ends the test, not the machine.
        while not sender.is_cancelled() and sent < 20000:
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([sent], np.int32))]))
            sent += 1
            time.sleep(0.001)
        error = pb_utils.TritonError(f"cancelled after {sent}", pb_utils.TritonError.CANCELLED)
        seen = request.is_cancelled()
        sender.send(pb_utils.InferenceResponse(error=error) if seen else None,
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def test_a_streaming_model_sees_the_cancellation(load):
    instance = load("until_cancelled", UNTIL_CANCELLED_PY, config=DECOUPLED_CONFIG)
    req, collected = streamed("until_cancelled", 0)
    req.cancellation = Cancellation()
    instance.execute([req])
    while not collected.responses:  # wait for the stream to begin
        assert not collected.done.wait(0.01), "the stream ended before it was cancelled"
    req.cancellation.cancel()
    responses = collected.wait()
    last = responses[-1]
    assert last is not None and last.error is not None, "the model never saw is_cancelled()"
    assert last.error.status is Status.CANCELLED
    assert len(responses) < 20000


# --- BLS --------------------------------------------------------------------------------


class Doubling(InferenceClient):
    """A server with two models: ``double`` (one response, IN * 2) and ``count``
    (decoupled: IN[0] responses), plus errors for any other name."""

    def __init__(self) -> None:
        self.seen: list[InferenceRequest] = []
        self.controls: list[tuple[object, ...]] = []

    def _answer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        if request.model_name != "double":
            return InferenceResponse(error=InferenceServerError(
                f"Request for unknown model: '{request.model_name}' is not found",
                Status.NOT_FOUND))
        tensor = request.inputs["IN"]
        doubled = tensor.data * 2
        return InferenceResponse(outputs=[Tensor("OUT", tensor.datatype, doubled.shape,
                                                 doubled)])

    def infer(self, request: InferenceRequest) -> Future[InferenceResponse]:
        future: Future[InferenceResponse] = Future()
        # From another thread, as a real server answers.
        threading.Thread(target=lambda: future.set_result(self._answer(request))).start()
        return future

    def stream(self, request: InferenceRequest, on_response: ResponseCallback) -> None:
        self.seen.append(request)
        count = int(request.inputs["IN"].data[0])

        def send() -> None:
            for i in range(count):
                out = np.array([i], np.int32)
                on_response(InferenceResponse(outputs=[Tensor("OUT", "INT32", (1,), out)]),
                            False)
            on_response(None, True)

        threading.Thread(target=send).start()

    def is_ready(self, name: str, version: int = -1) -> bool:
        return name in ("double", "count")

    def load(self, name: str, config: str = "", files: dict[str, bytes] | None = None
             ) -> Future[None]:
        self.controls.append(("load", name, config, dict(files or {})))
        return self._control(name)

    def unload(self, name: str, unload_dependents: bool = False) -> Future[None]:
        self.controls.append(("unload", name, unload_dependents))
        return self._control(name)

    def _control(self, name: str) -> Future[None]:
        future: Future[None] = Future()
        if name == "double":
            future.set_result(None)
        else:
            future.set_exception(InferenceServerError(f"failed to load '{name}'"))
        return future


BLS_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


def run_bls(load: Callable[..., object], body: str, value: np.ndarray,
            server: Doubling) -> np.ndarray:
    model_py = f"""
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


def call(name, array, **kwargs):
    return pb_utils.InferenceRequest(model_name=name, inputs=[pb_utils.Tensor("IN", array)],
                                     requested_output_names=["OUT"], **kwargs)


def out(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()


class TritonPythonModel:
{body}
"""
    instance = load("bls", model_py, config=BLS_CONFIG, server=server)
    response = instance.execute([request("bls", {"IN": value})])[0]  # type: ignore[attr-defined]
    if response.error is not None:
        raise response.error
    return response.outputs[0].data


def test_bls_exec_reaches_the_server(load):
    server = Doubling()
    body = """
    def execute(self, requests):
        array = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
        result = out(call("double", array, request_id="r1", correlation_id=7, flags=1,
                          timeout=5000, parameters={"k": "v"}).exec())
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", result)])]
"""
    # Large enough to travel through shared memory from a worker.
    value = np.arange(50_000, dtype=np.int32)
    assert np.array_equal(run_bls(load, body, value, server), value * 2)
    sent = server.seen[0]
    assert sent.id == "r1" and sent.model_version == -1
    assert sent.requested_outputs is not None
    assert [o.name for o in sent.requested_outputs] == ["OUT"]
    assert sent.parameters == {"k": "v", "sequence_id": 7, "sequence_start": True,
                               "timeout": 5000}


def test_bls_errors_are_responses_with_an_error(load):
    body = """
    def execute(self, requests):
        response = call("missing", np.zeros(1, np.int32)).exec()
        assert response.has_error()
        message = response.error().message()
        assert "missing" in message, message
        assert response.error().code() == pb_utils.TritonError.NOT_FOUND
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))])]
"""
    assert run_bls(load, body, np.zeros(1, np.int32), Doubling()).tolist() == [1]


def test_bls_decoupled_exec_iterates_every_response(load):
    body = """
    def execute(self, requests):
        responses = list(call("count", np.array([4], np.int32)).exec(decoupled=True))
        # Four responses, then the final flag alone (an empty response), as in Triton.
        assert [len(r.output_tensors()) for r in responses] == [1, 1, 1, 1, 0], responses
        values = [int(out(r)[0]) for r in responses if r.output_tensors()]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(values, np.int32))])]
"""
    assert run_bls(load, body, np.zeros(1, np.int32), Doubling()).tolist() == [0, 1, 2, 3]


def test_bls_async_exec_runs_calls_concurrently(load):
    body = """
    async def execute(self, requests):
        calls = [call("double", np.array([i], np.int32)).async_exec() for i in range(5)]
        streams = call("count", np.array([2], np.int32)).async_exec(decoupled=True)
        results = await asyncio.gather(*calls)
        counted = [int(out(r)[0]) for r in await streams if r.output_tensors()]
        values = [int(out(r)[0]) for r in results] + counted
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(values, np.int32))])]
"""
    result = run_bls(load, body, np.zeros(1, np.int32), Doubling())
    assert result.tolist() == [0, 2, 4, 6, 8, 0, 1]


def test_is_model_ready_asks_the_server(load):
    body = """
    def execute(self, requests):
        ready = [pb_utils.is_model_ready("double"), pb_utils.is_model_ready("nope", "2")]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(ready, np.int32))])]
"""
    assert run_bls(load, body, np.zeros(1, np.int32), Doubling()).tolist() == [1, 0]


def test_load_and_unload_model_ask_the_server(load):
    server = Doubling()
    body = """
    def execute(self, requests):
        pb_utils.load_model("double", config='{"max_batch_size": 0}')
        pb_utils.unload_model("double", unload_dependents=True)
        try:
            pb_utils.load_model("other", files={"file:1/model.py": b"x",
                                                "file:1/data.bin": bytearray(range(256))})
        except pb_utils.TritonModelException as exc:
            assert "failed to load 'other'" in exc.message(), exc.message()
        else:
            raise AssertionError("a failed load raised nothing")
        try:
            pb_utils.load_model("other", "{}", files={"file:1/model.py": "text, not bytes"})
        except pb_utils.TritonModelException as exc:
            assert "maps 'file:<path>' names to bytes" in exc.message(), exc.message()
        else:
            raise AssertionError("files of str were sent")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))])]
"""
    assert run_bls(load, body, np.zeros(1, np.int32), server).tolist() == [1]
    # The files' contents reach the server whole, in both execution modes.
    assert server.controls == [("load", "double", '{"max_batch_size": 0}', {}),
                               ("unload", "double", True),
                               ("load", "other", "", {"file:1/model.py": b"x",
                                                      "file:1/data.bin": bytes(range(256))})]


@pytest.mark.parametrize("execution_mode", ["isolated"])
def test_a_worker_that_dies_ends_the_open_streams(load):
    instance = load("dies", """
        import os
        import threading
        import time
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                threading.Thread(target=self.stream, args=(requests[0],)).start()
                return None

            def stream(self, request):
                sender = request.get_response_sender()
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUT", np.array([1], np.int32))]))
                time.sleep(0.2)  # execute's result is back: only the stream is open
                os._exit(3)
    """, config=DECOUPLED_CONFIG)
    req, collected = streamed("dies", 1)
    assert instance.execute([req])[0].error is None
    first, last = collected.wait()
    assert outs([first]) == [1]
    assert last is not None and last.error is not None
    assert last.error.status is Status.UNAVAILABLE
    assert "worker process ended before the last response" in last.error.message
