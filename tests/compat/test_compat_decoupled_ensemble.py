"""Differential tests of an ensemble with a decoupled step (decoupled_ensemble_repository):
``pre`` (Python) -> ``gen`` (decoupled Python: COUNT responses) -> ``post`` (Python), as a
TensorRT-LLM ensemble is built. Triton streams each of gen's responses through post to the
client; naiad must send the same responses: over gRPC ModelStreamInfer and over
generate_stream, with the same configuration (the ensemble reads decoupled), the same refusal
of a non-streaming infer, and (naiad) a cancelled stream that stops the decoupled step.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from compat_helpers import http_request, on_both

pytestmark = pytest.mark.compat

grpcclient = pytest.importorskip("tritonclient.grpc")

# A copy: the decoupled step writes cancelled.log into its model folder.
COMPAT_MODEL_REPOSITORY = Path(tempfile.mkdtemp(prefix="naiad-decoupled-ensemble-")) / "models"
shutil.copytree(Path(__file__).parent / "decoupled_ensemble_repository", COMPAT_MODEL_REPOSITORY)
COMPAT_EXPECT_READY = ("pre", "gen", "post", "pipeline")


def _inputs(prompt: bytes, count: int) -> list[Any]:
    text = grpcclient.InferInput("PROMPT", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt], dtype=object))
    times = grpcclient.InferInput("COUNT", [1], "INT32")
    times.set_data_from_numpy(np.array([count], dtype=np.int32))
    return [text, times]


def stream(server: Any, count: int, cancel_after: int | None = None) -> list[tuple]:
    """Every response of one ModelStreamInfer request: (TEXT, INDEX, final)."""
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("pipeline", _inputs(b"hi", count), request_id="r1",
                              enable_empty_final_response=True)
    seen: list[tuple] = []
    try:
        while True:
            result, error = responses.get(timeout=30)
            if error is not None:
                seen.append(("error", str(error)))
                break
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            text, index = result.as_numpy("TEXT"), result.as_numpy("INDEX")
            seen.append((None if text is None else text.tolist(),
                         None if index is None else index.tolist(), final, response.id))
            if final or (cancel_after is not None and len(seen) >= cancel_after):
                break
    finally:
        client.stop_stream(cancel_requests=cancel_after is not None)
        client.close()
    return seen


def test_the_ensemble_reads_decoupled(triton: Any, naiad: Any) -> None:
    t, n = on_both(lambda s: http_request(s.http_port, "GET", "/v2/models/pipeline/config"),
                   triton, naiad)
    assert t.json()["model_transaction_policy"] == {"decoupled": True}
    assert n.json()["model_transaction_policy"] == t.json()["model_transaction_policy"]


@pytest.mark.parametrize("count", [0, 1, 4])
def test_grpc_stream_sends_each_response_through_the_steps(triton: Any, naiad: Any,
                                                           count: int) -> None:
    t, n = on_both(lambda s: stream(s, count), triton, naiad)

    def responses(seen: list[tuple]) -> list[tuple]:
        return [(text, index, request_id) for text, index, _, request_id in seen
                if text is not None]

    # Each of gen's responses, in order, then the end of the stream. Triton sends the final
    # flag alone, or on the last response when gen's final flag reached the ensemble before
    # post answered (timing); naiad always sends it alone.
    assert responses(t) == [([b"hi-%d#%d" % (i, i * 10)], [i], "r1") for i in range(count)]
    assert responses(n) == responses(t)
    assert t[-1][2] and n[-1][2] and not any(item[2] for item in n[:-1])
    assert n[-1][:2] == (None, None)


def test_generate_stream_sends_each_response(triton: Any, naiad: Any) -> None:
    def events(server: Any) -> tuple[int, list[dict]]:
        with requests.post(f"http://127.0.0.1:{server.http_port}/v2/models/pipeline/"
                           f"generate_stream", json={"PROMPT": "hi", "COUNT": 3},
                           stream=True, timeout=30) as response:
            lines = [line for line in response.iter_lines(decode_unicode=True) if line]
        data = [json.loads(line[len("data: "):]) for line in lines]
        # Triton adds sequence_* fields to every event; compared: the tensors and names.
        return response.status_code, [{key: event[key] for key in
                                       ("TEXT", "INDEX", "model_name", "model_version")}
                                      for event in data]

    t, n = on_both(events, triton, naiad)
    assert t[0] == 200 and [e["TEXT"] for e in t[1]] == ["hi-0#0", "hi-1#10", "hi-2#20"]
    assert n == t


def test_a_non_streaming_infer_is_refused(triton: Any, naiad: Any) -> None:
    body = {"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1], "data": ["hi"]},
                       {"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [1]}]}
    t, n = on_both(lambda s: http_request(s.http_port, "POST", "/v2/models/pipeline/infer",
                                          body), triton, naiad)
    assert t.status == 501 and n.status == t.status
    assert "decoupled" in n.json()["error"]


def test_a_cancelled_stream_stops_the_decoupled_step(naiad: Any, strict: bool) -> None:
    if not strict:
        pytest.skip("naiad's own check")
    log = COMPAT_MODEL_REPOSITORY / "gen" / "cancelled.log"
    before = log.read_text().splitlines() if log.exists() else []
    seen = stream(naiad, -1, cancel_after=3)  # gen streams until it is cancelled
    assert [item[1] for item in seen] == [[0], [1], [2]]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) > len(before):
            break
        time.sleep(0.05)
    assert log.exists() and len(log.read_text().splitlines()) > len(before), \
        "the decoupled step never saw its request cancelled"
