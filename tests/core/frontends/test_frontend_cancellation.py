"""Clients that give up, end to end against a naiad process: the model sees it
(``is_cancelled()``) when a gRPC stream is cancelled or its deadline passes, when a unary
gRPC call's deadline passes, and when an HTTP generate_stream client disconnects.

cancel_watch (a decoupled Python model) streams until it sees its cancellation and counts
the streams that did (MODE 1 reads the count); slow_watch (an ordinary one) does the same
for one request. A model notices within its polling period, so the tests poll the count."""

from __future__ import annotations

import http.client
import json
import queue
import socket

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from streaming_models import write_streaming_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

TIMEOUT_S = 30
POLLS = 300  # of the count, each a full request round trip


@pytest.fixture(scope="module", params=[(), ("--frontend-processes=1",),
                                        ("--frontend-processes=1", "--grpc-server=grpcio")],
                ids=["one-process", "frontend-process", "grpcio-frontend-process"])
def server(tmp_path_factory, request):
    """A single-process server, and one whose gRPC and HTTP are served by a frontend
    process, running naiad's gRPC server or grpc's (a unary ModelInfer then crosses to the
    engine as a GRPC_INFER frame, a stream as GRPC_STREAM, and the client's giving up as a
    DISCONNECT)."""
    repo = write_streaming_repository(tmp_path_factory.mktemp("cancellation"))
    with naiad_server("--model-repository", str(repo), *request.param) as process:
        yield process


def mode(value: int):
    tensor = grpcclient.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def seconds(value: float):
    tensor = grpcclient.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
    return [tensor]


def watched_count(url: str) -> int:
    """How many cancel_watch streams saw their cancellation so far."""
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer("cancel_watch", mode(1))
            result, error = results.get(timeout=TIMEOUT_S)
        finally:
            client.stop_stream()
    assert error is None, error
    return int(result.as_numpy("OUT")[0])


def wait_for_count(url: str, at_least: int) -> int:
    for _ in range(POLLS):
        count = watched_count(url)
        if count >= at_least:
            return count
    raise AssertionError(f"cancel_watch never saw cancellation #{at_least} (count {count})")


def test_a_cancelled_grpc_stream_cancels_its_requests(server):
    before = watched_count(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("cancel_watch", mode(0), request_id="cancel-me")
    for _ in range(3):  # it is streaming
        assert results.get(timeout=TIMEOUT_S)[1] is None
    client.stop_stream(cancel_requests=True)
    client.close()
    assert wait_for_count(server.grpc_url, before + 1) == before + 1


def test_a_grpc_stream_deadline_cancels_its_requests(server):
    before = watched_count(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        stream_timeout=1.0)
    client.async_stream_infer("cancel_watch", mode(0), request_id="deadline")
    while True:
        error = results.get(timeout=TIMEOUT_S)[1]
        if error is not None:
            break
    assert "Deadline Exceeded" in error.message()
    client.stop_stream()
    client.close()
    assert wait_for_count(server.grpc_url, before + 1) == before + 1


def test_a_unary_grpc_deadline_cancels_the_request(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert int(client.infer("slow_watch", seconds(0)).as_numpy("OUT")[0]) == 0
        with pytest.raises(InferenceServerException) as expired:
            client.infer("slow_watch", seconds(60), client_timeout=0.5)
        assert expired.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        # The model counted the request it saw cancelled (one instance: this call runs
        # after that one ended).
        assert int(client.infer("slow_watch", seconds(0)).as_numpy("OUT")[0]) == 1
        # Calls that complete are not marked cancelled when the call ends.
        assert int(client.infer("slow_watch", seconds(0.05)).as_numpy("OUT")[0]) == 1


def test_an_http_generate_stream_client_that_disconnects_cancels_the_request(server):
    before = watched_count(server.grpc_url)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=TIMEOUT_S)
    connection.request("POST", "/v2/models/cancel_watch/generate_stream",
                       body=json.dumps({"MODE": 0}),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    first = response.readline()  # one event is there: the model streams
    assert first.startswith(b"data: ")
    assert json.loads(first[len(b"data: "):])["OUT"] == 0
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    assert wait_for_count(server.grpc_url, before + 1) == before + 1
