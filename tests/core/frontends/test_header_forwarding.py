"""Header forwarding end to end (``--http-header-forward-pattern``,
``--grpc-header-forward-pattern``): real ``naiad serve`` processes, the official tritonclient,
and a Python model that answers with the parameters it was given.

What is expected is what tritonserver 2.51 does (observed): the pattern is searched for in the
header name, ignoring case; values are strings; a header wins over a body parameter of the
same name; every request of a gRPC stream gets the stream's headers. naiad sees HTTP names in
lowercase, and never forwards a header named like a parameter it acts on (``priority``...).
"""

from __future__ import annotations

import http.client
import json
import queue

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from params_model import INPUT, params_repository, seen_parameters

from naiad.testing import naiad_server

# Matches my_header anywhere, and two names naiad acts on.
PATTERN = "my_header|^priority$|^binary_data_output$|^sequence_id$"
HEADERS = {"my_header_1": "v1", "MY_HEADER_2": "v2", "x-my_header_3": "v3",
           "other": "o", "my-header": "not matched"}
FORWARDED = {"my_header_1": "v1", "my_header_2": "v2", "x-my_header_3": "v3"}


#: each server alone, and with a frontend process: the headers of a plain inference cross
#: in its INFER frame, a gRPC call's metadata in its frame (a stream's in GRPC_STREAM)
PROCESSES = pytest.fixture(scope="module", params=[(), ("--frontend-processes=1",)],
                           ids=["one process", "frontend process"])


@PROCESSES
def http_forwards(tmp_path_factory, request):
    """Forwards over HTTP only."""
    repo = params_repository(tmp_path_factory.mktemp("forward-http"))
    with naiad_server("--model-repository", str(repo),
                      f"--http-header-forward-pattern={PATTERN}", *request.param) as server:
        yield server


@PROCESSES
def grpc_forwards(tmp_path_factory, request):
    """Forwards over gRPC only."""
    repo = params_repository(tmp_path_factory.mktemp("forward-grpc"))
    with naiad_server("--model-repository", str(repo),
                      f"--grpc-header-forward-pattern={PATTERN}", *request.param) as server:
        yield server


def http_infer(server, headers: dict | None,
               parameters: dict | None = None) -> httpclient.InferResult:
    inputs = [httpclient.InferInput("INPUT0", [1], "FP32")]
    inputs[0].set_data_from_numpy(INPUT)
    with httpclient.InferenceServerClient(server.http_url) as client:
        # A copy: tritonclient.http adds Inference-Header-Content-Length to the dict it gets.
        return client.infer("params", inputs, headers=dict(headers or {}),
                            parameters=parameters)


def grpc_inputs() -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", [1], "FP32")]
    inputs[0].set_data_from_numpy(INPUT)
    return inputs


def grpc_infer(server, headers: dict | None, parameters: dict | None = None) -> dict:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return seen_parameters(client.infer("params", grpc_inputs(), headers=headers,
                                            parameters=parameters))


def grpc_stream(server, headers: dict | None, parameters: list[dict | None]) -> list[dict]:
    """One stream with the given headers, one request per entry of ``parameters``."""
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(lambda result, error: answers.put(error or result), headers=headers)
        try:
            for params in parameters:
                client.async_stream_infer("params", grpc_inputs(), parameters=params)
            results = [answers.get(timeout=30) for _ in parameters]
        finally:
            client.stop_stream()
    return [seen_parameters(result) for result in results]


def lowercase(headers: dict) -> dict:
    return {name.lower(): value for name, value in headers.items()}  # gRPC keys are lowercase


# --- HTTP ------------------------------------------------------------------------------------


def test_http_forwards_matching_headers_only(http_forwards):
    assert seen_parameters(http_infer(http_forwards, HEADERS)) == FORWARDED
    assert seen_parameters(http_infer(http_forwards, {"other": "o"})) == {}
    assert seen_parameters(http_infer(http_forwards, None)) == {}


def test_http_header_wins_over_body_parameter(http_forwards):
    got = seen_parameters(http_infer(http_forwards, {"my_header_1": "from-header"},
                                     {"my_header_1": "from-body", "n": 7, "s": "x"}))
    assert got == {"my_header_1": "from-header", "n": 7, "s": "x"}
    # Without the header the body's parameters are untouched.
    assert seen_parameters(http_infer(http_forwards, None, {"n": 7})) == {"n": 7}


def test_http_never_forwards_control_parameters(http_forwards):
    # Raw, so that the body asks for no output encoding: a forwarded binary_data_output
    # would turn the JSON answer binary; priority would become a string where a number goes.
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32",
                                   "data": [1]}]})
    conn = http.client.HTTPConnection("127.0.0.1", http_forwards.http_port, timeout=30)
    try:
        conn.request("POST", "/v2/models/params/infer", body, headers={
            "binary_data_output": "true", "priority": "3", "sequence_id": "9",
            "my_header_1": "v1"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("inference-header-content-length") is None
        doc = json.loads(response.read())
    finally:
        conn.close()
    assert json.loads(doc["outputs"][0]["data"][0]) == {"my_header_1": "v1"}


def test_grpc_does_not_forward_without_its_pattern(http_forwards):
    assert grpc_infer(http_forwards, lowercase(HEADERS)) == {}
    assert grpc_stream(http_forwards, lowercase(HEADERS), [None]) == [{}]


# --- gRPC ------------------------------------------------------------------------------------


def test_grpc_forwards_matching_metadata_only(grpc_forwards):
    assert grpc_infer(grpc_forwards, lowercase(HEADERS)) == FORWARDED
    assert grpc_infer(grpc_forwards, {"other": "o"}) == {}
    assert grpc_infer(grpc_forwards, None) == {}


def test_grpc_header_wins_over_body_parameter(grpc_forwards):
    got = grpc_infer(grpc_forwards, {"my_header_1": "from-header"},
                     {"my_header_1": "from-body", "n": 7})
    assert got == {"my_header_1": "from-header", "n": 7}


def test_grpc_never_forwards_control_parameters(grpc_forwards):
    assert grpc_infer(grpc_forwards, {"priority": "3", "sequence_id": "9",
                                      "my_header_1": "v1"}) == {"my_header_1": "v1"}


def test_grpc_stream_requests_share_the_streams_headers(grpc_forwards):
    got = grpc_stream(grpc_forwards, lowercase(HEADERS), [None, {"n": 1}, {"my_header_1": "b"}])
    assert got == [FORWARDED, {**FORWARDED, "n": 1}, FORWARDED]
    assert grpc_stream(grpc_forwards, None, [{"n": 1}]) == [{"n": 1}]


def test_http_does_not_forward_without_its_pattern(grpc_forwards):
    assert seen_parameters(http_infer(grpc_forwards, HEADERS)) == {}
