"""The classification extension, naiad against the real Triton 2.51.

``classification_repository``: ``scores`` (FP32, batching, OUTPUT0 labelled from labels.txt
whose third line is empty, OUTPUT1 without labels), ``scores_nobatch`` (FP64 [2, 3], not
batching: one ranking over all six values), ``counts`` (INT32). The same requests go to both
servers over HTTP (``parameters.classification``) and gRPC (``class_count``) and the answers
must be equal: shape, datatype and every ``value:index[:label]`` string (Triton's number
formatting included). Classification into shared memory is refused by both, and both list
the extension in ``GET /v2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compat_helpers import http_request, on_both

pytestmark = pytest.mark.compat

COMPAT_MODEL_REPOSITORY = Path(__file__).resolve().parent / "classification_repository"
COMPAT_EXPECT_READY = ("scores", "scores_nobatch", "counts")

SCORES = [[0.1, 0.7, 0.05, 0.9, 0.3], [2.5, -1.0, 3.25, 0.0, 1.0]]
NOBATCH = [[1.5, -2.0, 0.25], [9.0, 0.125, 3.0]]
COUNTS = [[4, 40, -7, 12]]


def http_classify(server: Any, model: str, datatype: str, data: list[Any],
                  outputs: dict[str, int]) -> dict[str, Any]:
    shape = list(np.asarray(data).shape)
    body = {
        "inputs": [{"name": "INPUT0", "shape": shape, "datatype": datatype,
                    "data": np.asarray(data).flatten().tolist()}],
        "outputs": [{"name": name, "parameters": {"classification": count}}
                    for name, count in outputs.items()],
    }
    res = http_request(server.http_port, "POST", f"/v2/models/{model}/infer", body)
    assert res.status == 200, res
    return {o["name"]: (o["datatype"], o["shape"], o["data"]) for o in res.json()["outputs"]}


def grpc_classify(server: Any, model: str, datatype: str, data: list[Any],
                  outputs: dict[str, int]) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient

    array = np.asarray(data, dtype={"FP32": np.float32, "FP64": np.float64,
                                    "INT32": np.int32}[datatype])
    inp = grpcclient.InferInput("INPUT0", list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(model, [inp], outputs=[
            grpcclient.InferRequestedOutput(name, class_count=count)
            for name, count in outputs.items()])
    return {name: (result.get_output(name).datatype, list(result.get_output(name).shape),
                   [b.decode() for b in result.as_numpy(name).flatten()])
            for name in outputs}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(("model", "datatype", "data", "outputs"), [
    ("scores", "FP32", SCORES, {"OUTPUT0": 3}),
    ("scores", "FP32", SCORES, {"OUTPUT0": 5, "OUTPUT1": 2}),
    ("scores", "FP32", SCORES[:1], {"OUTPUT0": 9}),  # more than there are: all of them
    ("scores_nobatch", "FP64", NOBATCH, {"OUTPUT0": 4, "OUTPUT1": 1}),
    ("counts", "INT32", COUNTS, {"OUTPUT0": 2}),
])
def test_classification_matches_triton(servers: Any, protocol: str, model: str, datatype: str,
                                       data: list[Any], outputs: dict[str, int]) -> None:
    call = http_classify if protocol == "http" else grpc_classify
    t, n = on_both(lambda s: call(s, model, datatype, data, outputs),
                   servers.triton, servers.naiad)
    assert n == t


def test_the_extension_is_advertised(servers: Any) -> None:
    t, n = on_both(lambda s: http_request(s.http_port, "GET", "/v2").json()["extensions"],
                   servers.triton, servers.naiad)
    assert "classification" in t and "classification" in n


def test_classification_into_shared_memory_is_refused(servers: Any) -> None:
    """Triton refuses a classification output bound to a shared memory region; so does
    naiad (both before the model runs: the region need not even exist)."""
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32",
                    "data": SCORES[0]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {
            "classification": 2, "shared_memory_region": "nowhere",
            "shared_memory_byte_size": 64}}],
    }
    t, n = on_both(lambda s: http_request(s.http_port, "POST", "/v2/models/scores/infer",
                                          body), servers.triton, servers.naiad)
    assert t.status >= 400 and n.status >= 400, (t, n)


def test_a_stream_classifies_too(servers: Any) -> None:
    import queue

    import tritonclient.grpc as grpcclient

    def stream(server: Any) -> list[str]:
        answers: queue.Queue[Any] = queue.Queue()
        inp = grpcclient.InferInput("INPUT0", [2, 5], "FP32")
        inp.set_data_from_numpy(np.asarray(SCORES, np.float32))
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.start_stream(callback=lambda result, error: answers.put(error or result))
            client.async_stream_infer("scores", [inp], outputs=[
                grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
            answer = answers.get(timeout=60)
            client.stop_stream()
        assert not isinstance(answer, Exception), answer
        return [b.decode() for b in answer.as_numpy("OUTPUT0").flatten()]

    t, n = on_both(stream, servers.triton, servers.naiad)
    assert n == t
