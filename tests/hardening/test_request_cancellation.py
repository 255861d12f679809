"""Triton's qa/L0_request_cancellation, the parts tests/core/frontends/test_frontend_cancellation.py
lacks: a gRPC ``async_infer`` cancelled, a gRPC stream cancelled with requests queued, and
HTTP clients that disconnect, each with one request executing and two queued behind it
(models/sleepy behind a one-instance dynamic batcher: ``sleepy_batched``).

As Triton's scheduler_test checks it: a queued request that is cancelled is withdrawn and
never runs, the one executing runs to its end (its answer unread), and the statistics
settle: every request sent is a success or a failure (reason CANCELED), executions count
only what ran, nothing stays pending; the server serves the next request correctly. (A
stream or unary deadline, and an HTTP generate_stream disconnect, are
test_frontend_cancellation.py's.)"""

from __future__ import annotations

import json
import queue
import socket
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hardening_support import (
    ANSWER_TIMEOUT_S,
    metric,
    pending,
    request_bytes,
    request_counts,
    wait_until,
)
from tritonclient.utils import InferenceServerException

SENT = 3  # one executing, two queued behind it
DATA = np.arange(4, dtype=np.float32).reshape(1, 4)


def inputs() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", list(DATA.shape), "FP32")
    tensor.set_data_from_numpy(DATA)
    return [tensor]


def cancelled_count(server, model: str) -> int:
    return int(metric(server.metrics_port, "nv_inference_request_failure", model=model,
                      reason="CANCELED"))


def cancel_with_two_queued(server, model: str, send: Callable[[], None],
                           cancel: Callable[[], None]) -> None:
    """``send()`` SENT requests, wait until two of them are queued, ``cancel()``; then
    check the accounting and that the model still serves."""
    before = request_counts(server.http_port, model)
    cancelled_before = cancelled_count(server, model)
    send()
    wait_until(lambda: pending(server.metrics_port, model) == SENT - 1,
               f"{SENT - 1} requests queued behind the one executing on {model}")
    cancel()

    def settled() -> bool:
        now = request_counts(server.http_port, model)
        return (now["success"] + now["fail"] - before["success"] - before["fail"] == SENT
                and pending(server.metrics_port, model) == 0)

    wait_until(settled, f"every request to {model} counted, none pending")
    after = request_counts(server.http_port, model)
    succeeded = after["success"] - before["success"]
    cancelled = cancelled_count(server, model) - cancelled_before
    # The one executing runs to its end; the queued ones are withdrawn (one of them may
    # have started first if the machine stalled between the count and the cancel).
    assert succeeded >= 1 and cancelled >= 1, (succeeded, cancelled)
    assert after["fail"] - before["fail"] == cancelled  # no other failure
    assert after["executions"] - before["executions"] == succeeded  # withdrawn: never ran
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(model, inputs(), client_timeout=ANSWER_TIMEOUT_S)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
    assert server.process.poll() is None, server.log()[-3000:]


def test_grpc_async_infer_cancelled_while_queued_and_executing(hardening_server,
                                                               sleepy_batched):
    answers: queue.Queue = queue.Queue()
    futures = []
    with grpcclient.InferenceServerClient(hardening_server.grpc_url) as client:

        def send() -> None:
            for _ in range(SENT):
                futures.append(client.async_infer(
                    sleepy_batched, inputs(),
                    callback=lambda result, error: answers.put((result, error))))

        def cancel() -> None:
            for future in futures:
                future.cancel()

        cancel_with_two_queued(hardening_server, sleepy_batched, send, cancel)
        for _ in range(SENT):  # the client answers each call itself: cancelled
            result, error = answers.get(timeout=ANSWER_TIMEOUT_S)
            assert result is None and isinstance(error, InferenceServerException)
            assert error.status() == "StatusCode.CANCELLED", error


def test_grpc_stream_cancelled_with_requests_queued(hardening_server, sleepy_batched):
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(hardening_server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:

        def send() -> None:
            for index in range(SENT):
                client.async_stream_infer(sleepy_batched, inputs(), request_id=str(index))

        cancel_with_two_queued(hardening_server, sleepy_batched, send,
                               lambda: client.stop_stream(cancel_requests=True))
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    while not answers.empty():  # what came back before the cancel is the data sent
        result, error = answers.get_nowait()
        if error is None:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
        else:
            assert error.status() == "StatusCode.CANCELLED", error


@pytest.fixture
def sockets():
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def test_http_clients_disconnecting_while_queued_and_executing(hardening_server,
                                                               sleepy_batched, sockets):
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                                   "data": DATA.ravel().tolist()}]}).encode()
    request = request_bytes("POST", f"/v2/models/{sleepy_batched}/infer", body,
                            {"Content-Type": "application/json"})

    def send() -> None:
        for _ in range(SENT):
            sock = socket.create_connection(("127.0.0.1", hardening_server.http_port),
                                            timeout=ANSWER_TIMEOUT_S)
            sockets.append(sock)
            sock.sendall(request)

    def disconnect() -> None:
        for sock in sockets:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    cancel_with_two_queued(hardening_server, sleepy_batched, send, disconnect)
