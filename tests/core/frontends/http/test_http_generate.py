"""Triton's generate extension over HTTP, end to end against a naiad process, with plain
``http.client`` (tritonclient has no generate API): JSON keys to input tensors and
parameters, the answer's JSON, server-sent events, errors before and in the middle of a
stream, the refusal of a decoupled model on ``infer``, endpoint restrictions and the body
size limit. Bodies are those tritonserver 2.51 sends (tests/compat/TRITON_OBSERVED.md,
"Generate extension"); tests/compat/test_compat_streaming.py compares them side by side."""

from __future__ import annotations

import gzip
import http.client
import json

import pytest
from streaming_models import write_streaming_repository

from naiad.testing import naiad_server

TIMEOUT_S = 30
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream "
                "for model that generates various number of responses")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return write_streaming_repository(tmp_path_factory.mktemp("generate"))


@pytest.fixture(scope="module")
def server(repo):
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


def post(server, path: str, body, headers: dict[str, str] | None = None):
    """(status, content type, body bytes) of one POST on a fresh connection."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=TIMEOUT_S)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheader("content-type"), response.read()
    finally:
        connection.close()


def events(body: bytes) -> list[dict]:
    """The JSON objects of a server-sent event stream (``data: {...}`` blocks)."""
    assert body == b"" or body.endswith(b"\n\n"), body
    out = []
    for block in body.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: "), block
        out.append(json.loads(block[len(b"data: "):]))
    return out


ADD_SUB = {"INPUT0": [1, 2, 3, 4], "INPUT1": [10, 20, 30, 40]}
ADD_SUB_ANSWER = (b'{"OUTPUT0":[11.0,22.0,33.0,44.0],"OUTPUT1":[-9.0,-18.0,-27.0,-36.0],'
                  b'"model_name":"add_sub","model_version":"1"}')


# --- ordinary models ---------------------------------------------------------------------


def test_generate_on_an_ordinary_model(server):
    status, content_type, body = post(server, "/v2/models/add_sub/generate", ADD_SUB)
    assert (status, content_type) == (200, "application/json")
    assert body == ADD_SUB_ANSWER  # keys sorted, byte for byte tritonserver's


def test_generate_with_a_version_and_an_id(server):
    status, _, body = post(server, "/v2/models/add_sub/versions/1/generate",
                           {**ADD_SUB, "id": "req-7"})
    assert status == 200
    assert json.loads(body)["id"] == "req-7"
    assert body.index(b'"id"') < body.index(b'"model_name"')


def test_generate_stream_on_an_ordinary_model(server):
    status, content_type, body = post(server, "/v2/models/add_sub/generate_stream", ADD_SUB)
    assert (status, content_type) == (200, "text/event-stream; charset=utf-8")
    assert body == b"data: " + ADD_SUB_ANSWER + b"\n\n"


# --- decoupled models --------------------------------------------------------------------


def test_generate_stream_sends_one_event_per_response(server):
    status, _, body = post(server, "/v2/models/text_stream/generate_stream",
                           {"text_input": "hello", "count": 3})
    assert status == 200
    assert events(body) == [
        {"index": i, "model_name": "text_stream", "model_version": "1", "parameters": "{}",
         "text_output": f"hello {i}"} for i in range(3)]


def test_generate_stream_of_zero_responses_is_empty(server):
    status, content_type, body = post(server, "/v2/models/repeat/generate_stream", {"IN": []})
    assert (status, content_type, body) == (200, "text/event-stream; charset=utf-8", b"")


def test_an_error_in_the_middle_of_an_event_stream(server):
    status, _, body = post(server, "/v2/models/repeat/generate_stream", {"IN": [1, -2, 3]})
    assert status == 200
    assert events(body) == [
        {"IDX": 0, "OUT": 1, "model_name": "repeat", "model_version": "1"},
        {"error": "repeat: negative value -2 at index 1"},
        {"IDX": 2, "OUT": 3, "model_name": "repeat", "model_version": "1"}]


def test_an_error_first_sets_the_stream_status(server):
    status, content_type, body = post(server, "/v2/models/repeat/generate_stream",
                                      {"IN": [-1, 4]})
    assert (status, content_type) == (400, "text/event-stream; charset=utf-8")
    assert events(body)[0] == {"error": "repeat: negative value -1 at index 0"}
    assert events(body)[1]["OUT"] == 4


def test_generate_takes_one_response_then_the_final_flag(server):
    # repeat sends its response, then the final flag alone.
    status, _, body = post(server, "/v2/models/repeat/generate", {"IN": 5})
    assert status == 200
    assert json.loads(body) == {"IDX": 0, "OUT": 5, "model_name": "repeat",
                                "model_version": "1"}


@pytest.mark.parametrize("body", [{"text_input": "x", "count": 3},
                                  {"text_input": "x", "count": 0}])
def test_generate_refuses_other_than_one_response(server, body):
    status, _, answer = post(server, "/v2/models/text_stream/generate", body)
    assert status == 400
    message = json.loads(answer)["error"]
    assert message.startswith(ONE_RESPONSE) and "'text_stream'" in message


def test_generate_reports_the_model_error(server):
    status, _, body = post(server, "/v2/models/repeat/generate", {"IN": [-3]})
    assert status == 400
    assert json.loads(body) == {"error": "repeat: negative value -3 at index 0"}


def test_keys_that_are_no_inputs_are_parameters(server):
    status, _, body = post(server, "/v2/models/text_stream/generate", {
        "text_input": "p", "count": 1, "temperature": 0.5, "flag": True, "name": "n",
        "parameters": {"max_tokens": 7, "s": "x"}})
    assert status == 200
    assert json.loads(json.loads(body)["parameters"]) == {
        "temperature": 0.5, "flag": True, "name": "n", "max_tokens": 7, "s": "x"}


def test_a_compressed_body(server):
    body = gzip.compress(json.dumps(ADD_SUB).encode())
    status, _, answer = post(server, "/v2/models/add_sub/generate", body,
                             {"Content-Encoding": "gzip"})
    assert (status, answer) == (200, ADD_SUB_ANSWER)


# --- bad requests ------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "named"), [
    (b"not json", ["'add_sub'", "not valid JSON"]),
    (b"[1, 2]", ["'add_sub'", "JSON object"]),
    ({**ADD_SUB, "INPUT0": ["a", "b", "c", "d"]}, ["'add_sub'", "'INPUT0'", "FP32"]),
    ({**ADD_SUB, "INPUT0": [1, 2, 3]}, ["'add_sub'", "'INPUT0'", "[4]"]),
    ({**ADD_SUB, "INPUT0": 1}, ["'add_sub'", "'INPUT0'"]),
    ({"INPUT0": [1, 2, 3, 4]}, ["'add_sub'", "'INPUT1'"]),
    ({**ADD_SUB, "extra": {"a": 1}}, ["'add_sub'", "'extra'"]),
    ({**ADD_SUB, "extra": None}, ["'add_sub'", "'extra'"]),
    ({**ADD_SUB, "parameters": 5}, ["'add_sub'", "'parameters'"]),
    ({**ADD_SUB, "parameters": {"INPUT1": [0, 0, 0, 0]}}, ["'add_sub'", "'INPUT1'",
                                                           "already exists"]),
    ({**ADD_SUB, "id": 5}, ["'add_sub'", "'id'"]),
])
@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_bad_bodies_get_400_naming_model_and_tensor(server, endpoint, body, named):
    status, content_type, answer = post(server, f"/v2/models/add_sub/{endpoint}", body)
    assert (status, content_type) == (400, "application/json")
    message = json.loads(answer)["error"]
    for part in named:
        assert part in message, message


def test_an_unknown_model_is_404(server):
    status, _, body = post(server, "/v2/models/nope/generate_stream", {"a": 1})
    assert status == 404
    assert json.loads(body) == {"error": "Request for unknown model: 'nope' is not found"}


def test_generate_is_post_only(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", "/v2/models/add_sub/generate")
        response = connection.getresponse()
        assert (response.status, response.read()) == (405, b'{"error":"Method Not Allowed"}')
    finally:
        connection.close()


def test_http_infer_refuses_a_decoupled_model(server):
    status, _, body = post(server, "/v2/models/repeat/infer", {
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]})
    assert status == 501
    message = json.loads(body)["error"]
    assert message.startswith(
        "HTTP end point doesn't support models with decoupled transaction policy")
    assert "'repeat'" in message
    # The server keeps serving the model.
    assert post(server, "/v2/models/repeat/generate", {"IN": 2})[0] == 200


# --- restrictions and limits -------------------------------------------------------------


@pytest.fixture(scope="module")
def restricted(repo):
    with naiad_server("--model-repository", str(repo), "--http-restricted-api=inference:k=v",
                      "--http-max-input-size=256") as process:
        yield process


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_generate_is_in_the_inference_api_group(restricted, endpoint):
    status, _, body = post(restricted, f"/v2/models/add_sub/{endpoint}", ADD_SUB)
    assert (status, body) == (403, b'{"error":"This API is restricted, expecting header \'k\'"}')
    assert post(restricted, f"/v2/models/add_sub/{endpoint}", ADD_SUB, {"k": "v"})[0] == 200


def test_generate_honours_the_request_size_limit(restricted):
    big = {**ADD_SUB, "padding": "x" * 300}
    status, _, body = post(restricted, "/v2/models/add_sub/generate", big, {"k": "v"})
    assert status == 413
    assert "--http-max-input-size" in json.loads(body)["error"]
