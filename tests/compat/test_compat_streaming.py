"""Differential tests of decoupled models and streaming: the same generate /
generate_stream requests and ModelStreamInfer streams to Triton and to naiad.

Models (tests/compat/model_repository): ``repeat`` (decoupled; one response per element of
IN from a thread of its own, an error response for a negative element, then the final flag
alone), ``text_stream`` (decoupled; ``count`` responses, the last one final, echoing the
request's parameters), ``cancel_watch`` (decoupled; streams until cancelled, counts it), and
the ordinary add_sub, strings, identity_batch, raises, error_response.

Compared: HTTP status, content type, and the bodies as JSON (server-sent events parsed
into their JSON objects); for gRPC, every ModelStreamInferResponse of one request, as a
dict. Deliberate differences (off in the Triton-vs-Triton self-test): naiad answers 400
where Triton answers 500 to a bad body, and 400 where Triton answers 200 with the
"exactly 1 response" error; naiad's error messages may say more, and name the model.
"""

from __future__ import annotations

import json
import queue
import time
from typing import Any

import numpy as np
import pytest
from compat_helpers import (
    GOOD_MODELS,
    HttpResult,
    http_request,
    json_diff,
    on_both,
    serialize_bytes,
)

pytestmark = pytest.mark.compat

grpc = pytest.importorskip("grpc")
from google.protobuf import json_format  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.grpc import service_pb2_grpc as pbg  # noqa: E402

STREAMING_MODELS = ("repeat", "text_stream", "cancel_watch")
COMPAT_EXPECT_READY = (*GOOD_MODELS, *STREAMING_MODELS)
# the models these requests name (conftest.py serves only these)
COMPAT_MODELS = ("add_sub", "strings", "identity_batch", "raises", "error_response",
                 *STREAMING_MODELS)
EVENT_STREAM = "text/event-stream"
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream "
                "for model that generates various number of responses")
TIMEOUT_S = 30.0


def sse(result: HttpResult) -> list[Any]:
    """The JSON objects of a server-sent event stream."""
    body = result.body
    assert body == b"" or body.endswith(b"\n\n"), f"not an event stream: {result!r}"
    out = []
    for block in body.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: "), f"not a data event: {block!r}"
        out.append(json.loads(block[len(b"data: "):]))
    return out


def content(result: HttpResult) -> Any:
    return sse(result) if result.content_type == EVENT_STREAM else result.json()


# --- generate and generate_stream --------------------------------------------------------

ADD_SUB = {"INPUT0": [1, 2, 3, 4], "INPUT1": [10, 20, 30, 40]}

# (id, path, body): answered alike by both servers, byte for byte after JSON parsing
SAME = [
    ("add_sub", "/v2/models/add_sub/generate", ADD_SUB),
    ("add_sub-stream", "/v2/models/add_sub/generate_stream", ADD_SUB),
    ("add_sub-version-id", "/v2/models/add_sub/versions/1/generate",
     {**ADD_SUB, "id": "x1", "extra": 5, "parameters": {"p": 1}}),
    ("strings-list", "/v2/models/strings/generate", {"INPUT0": ["a", "b"]}),
    ("strings-scalar", "/v2/models/strings/generate", {"INPUT0": "a"}),
    ("batching", "/v2/models/identity_batch/generate", {"INPUT0": [1, 2, 3]}),
    ("batching-one", "/v2/models/identity_batch/generate", {"INPUT0": 5}),
    ("text-stream", "/v2/models/text_stream/generate_stream", {"text_input": "hi", "count": 3}),
    ("text-parameters", "/v2/models/text_stream/generate_stream",
     {"text_input": "hi", "count": 1, "temperature": 0.5, "flag": True, "name": "n",
      "parameters": {"max_tokens": 7, "s": "x"}}),
    ("zero-responses", "/v2/models/repeat/generate_stream", {"IN": []}),
    ("error-in-the-middle", "/v2/models/repeat/generate_stream", {"IN": [1, -2, 3]}),
    ("error-first", "/v2/models/repeat/generate_stream", {"IN": [-1, 4]}),
    ("one-then-final-flag", "/v2/models/repeat/generate", {"IN": [5]}),
    ("model-error", "/v2/models/repeat/generate", {"IN": [-1]}),
    ("raises", "/v2/models/raises/generate", {"INPUT0": [1, 2, 3, 4]}),
    ("raises-stream", "/v2/models/raises/generate_stream", {"INPUT0": [1, 2, 3, 4]}),
    ("error_response-stream", "/v2/models/error_response/generate_stream",
     {"INPUT0": [1, 2, 3, 4]}),
    ("unknown-model", "/v2/models/nope/generate", {"a": 1}),
    ("unknown-version", "/v2/models/add_sub/versions/7/generate", ADD_SUB),
]


def both_post(servers: Any, path: str, body: Any) -> tuple[HttpResult, HttpResult]:
    return on_both(lambda s: http_request(s.http_port, "POST", path, body),
                   servers.triton, servers.naiad)


@pytest.mark.parametrize(("path", "body"), [pytest.param(p, b, id=i) for i, p, b in SAME])
def test_generate_answers_alike(servers: Any, strict: bool, path: str, body: Any) -> None:
    t, n = both_post(servers, path, body)
    assert n.status == t.status, f"status: triton {t!r}, naiad {n!r}"
    assert n.content_type == t.content_type, (t.content_type, n.content_type)
    tc, nc = content(t), content(n)
    if strict and t.status == 404:  # naiad adds which versions it serves
        assert nc["error"].startswith(tc["error"]), (tc, nc)
        return
    diff = json_diff(tc, nc)
    assert not diff, "\n".join(diff)


# (id, path, body, text naiad's message must hold): Triton 500, naiad 400
TRITON_500 = [
    ("not-json", "/v2/models/add_sub/generate", "not json", "'add_sub'"),
    ("not-an-object", "/v2/models/add_sub/generate", "[1,2]", "'add_sub'"),
    ("string-for-fp32", "/v2/models/add_sub/generate",
     {**ADD_SUB, "INPUT0": ["a", "b", "c", "d"]}, "'INPUT0'"),
    ("number-for-bytes", "/v2/models/strings/generate", {"INPUT0": [1]}, "'INPUT0'"),
    ("float-for-int32", "/v2/models/text_stream/generate", {"text_input": "a", "count": 1.5},
     "'count'"),
    ("parameters-not-an-object", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "parameters": 5}, "'parameters'"),
    ("id-not-a-string", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "id": 5}, "'id'"),
    ("nested-list", "/v2/models/repeat/generate_stream", {"IN": [[1, 2]]}, "'IN'"),
]

# (id, path, body, text naiad's message must hold): 400 on both
BOTH_400 = [
    ("wrong-count", "/v2/models/add_sub/generate", {"INPUT0": [1, 2, 3], "INPUT1": [1, 2, 3]},
     "The schema can not convert input 'INPUT0' to tensor with proper shape"),
    ("scalar-for-4", "/v2/models/add_sub/generate", {**ADD_SUB, "INPUT0": 1}, "'INPUT0'"),
    ("missing-input", "/v2/models/add_sub/generate", {"INPUT0": [1, 2, 3, 4]}, "'INPUT1'"),
    ("object-parameter", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "z": {"q": 1}}, "parameter 'z' has invalid type"),
    ("null-parameter", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "z": None}, "parameter 'z' has invalid type"),
    ("nested-parameter", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "parameters": {"a": [1]}}, "'a'"),
    ("input-twice", "/v2/models/text_stream/generate",
     {"text_input": "a", "count": 1, "parameters": {"text_input": "b"}},
     "input 'text_input' already exists in request"),
    ("two-for-one", "/v2/models/text_stream/generate", {"text_input": ["a", "b"], "count": 1},
     "'text_input'"),
]


@pytest.mark.parametrize(("path", "body", "named"),
                         [pytest.param(p, b, m, id=i) for i, p, b, m in TRITON_500 + BOTH_400])
def test_bad_generate_bodies(servers: Any, strict: bool, path: str, body: Any,
                             named: str) -> None:
    t, n = both_post(servers, path, body)
    assert t.json()["error"], t
    assert n.content_type == t.content_type == "application/json"
    if strict and t.status == 500:
        assert n.status == 400, f"naiad must answer 400 where Triton answers 500: {n!r}"
    else:
        assert n.status == t.status, f"status: triton {t!r}, naiad {n!r}"
        assert t.status in (400, 500), t
    if strict:
        message = n.json()["error"]
        assert named in message, message


@pytest.mark.parametrize("body", [{"text_input": "x", "count": 3},
                                  {"text_input": "x", "count": 0}])
def test_generate_needs_exactly_one_response(servers: Any, strict: bool, body: Any) -> None:
    t, n = both_post(servers, "/v2/models/text_stream/generate", body)
    assert t.json()["error"] == ONE_RESPONSE
    assert n.json()["error"].startswith(ONE_RESPONSE)
    # Triton says 200; naiad 400: the request, not the server, is at fault.
    assert n.status == (400 if strict else t.status)


def test_infer_refuses_a_decoupled_model(servers: Any) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    t, n = both_post(servers, "/v2/models/repeat/infer", body)
    assert t.status == n.status == 501
    assert n.json()["error"].startswith(t.json()["error"])


# --- ModelStreamInfer --------------------------------------------------------------------


def stream_request(model: str, request_id: str, empty_final: bool | None = None,
                   **inputs: np.ndarray) -> Any:
    message = pb.ModelInferRequest(model_name=model, id=request_id)
    for name, array in inputs.items():
        datatype = "BYTES" if array.dtype == np.object_ else {
            np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32"}[array.dtype]
        message.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        message.raw_input_contents.append(serialize_bytes(array.tolist()) if datatype == "BYTES"
                                          else array.tobytes())
    if empty_final is not None:
        message.parameters["triton_enable_empty_final_response"].bool_param = empty_final
    return message


def stream_messages(server: Any, message: Any) -> list[dict]:
    """Every ModelStreamInferResponse to one request, as dicts, until the stream ends
    (the client half-closes after a while, the server ends the call when it answered)."""

    def requests() -> Any:
        yield message
        time.sleep(1.0)  # time for the responses a model sends after execute returned

    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        return [json_format.MessageToDict(m) for m in
                stub.ModelStreamInfer(requests(), timeout=TIMEOUT_S)]


IN = {"IN": np.array([1, -2, 3], np.int32)}
STREAMS = [
    ("many-empty-final", lambda: stream_request("repeat", "r1", True, **IN)),
    ("many", lambda: stream_request("repeat", "r2", None, **IN)),
    ("zero-empty-final", lambda: stream_request("repeat", "r3", True, IN=np.zeros(0, np.int32))),
    ("zero", lambda: stream_request("repeat", "r4", None, IN=np.zeros(0, np.int32))),
    ("final-with-outputs", lambda: stream_request(
        "text_stream", "t1", True, text_input=np.array([b"hi"], np.object_),
        count=np.array([2], np.int32))),
    ("ordinary", lambda: stream_request("add_sub", "a1", None,
                                        INPUT0=np.arange(4, dtype=np.float32),
                                        INPUT1=np.ones(4, np.float32))),
    ("ordinary-empty-final", lambda: stream_request("add_sub", "a2", True,
                                                    INPUT0=np.arange(4, dtype=np.float32),
                                                    INPUT1=np.ones(4, np.float32))),
    ("ordinary-model-error", lambda: stream_request("raises", "x1", True,
                                                    INPUT0=np.zeros(4, np.float32))),
    ("unknown-model", lambda: stream_request("nope", "n1", True, IN=np.ones(1, np.int32))),
]


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in STREAMS])
def test_stream_messages_alike(servers: Any, strict: bool, make: Any) -> None:
    t, n = on_both(lambda s: stream_messages(s, make()), servers.triton, servers.naiad)
    if strict:  # naiad's refusals name more (the model, the versions it serves)
        for tm, nm in zip(t, n, strict=False):
            if "errorMessage" in tm and "errorMessage" in nm and \
                    nm["errorMessage"].startswith(tm["errorMessage"]):
                nm["errorMessage"] = tm["errorMessage"]
    diff = json_diff(t, n)
    assert not diff, "\n".join(diff)


def test_unary_infer_refuses_a_decoupled_model(servers: Any) -> None:
    def call(server: Any) -> Any:
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = pbg.GRPCInferenceServiceStub(channel)
            try:
                stub.ModelInfer(stream_request("repeat", "u1", None, IN=np.ones(1, np.int32)),
                                timeout=TIMEOUT_S)
            except grpc.RpcError as exc:
                return exc.code(), exc.details()
        raise AssertionError("ModelInfer on a decoupled model succeeded")

    (tcode, tdetails), (ncode, ndetails) = on_both(call, servers.triton, servers.naiad)
    assert tcode == ncode == grpc.StatusCode.UNIMPLEMENTED
    assert ndetails.startswith(tdetails)


def test_a_cancelled_stream_is_seen_by_the_model(servers: Any) -> None:
    import tritonclient.grpc as grpcclient

    def watched(server: Any) -> int:
        results: queue.Queue = queue.Queue()
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            tensor = grpcclient.InferInput("MODE", [1], "INT32")
            tensor.set_data_from_numpy(np.array([1], np.int32))
            client.async_stream_infer("cancel_watch", [tensor])
            result, error = results.get(timeout=TIMEOUT_S)
            client.stop_stream()
        assert error is None
        return int(result.as_numpy("OUT")[0])

    def cancel_one(server: Any) -> int:
        before = watched(server)
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        tensor = grpcclient.InferInput("MODE", [1], "INT32")
        tensor.set_data_from_numpy(np.array([0], np.int32))
        client.async_stream_infer("cancel_watch", [tensor])
        for _ in range(3):
            assert results.get(timeout=TIMEOUT_S)[1] is None
        client.stop_stream(cancel_requests=True)
        client.close()
        for _ in range(300):
            after = watched(server)
            if after > before:
                return after - before
        return 0

    assert on_both(cancel_one, servers.triton, servers.naiad) == (1, 1)
