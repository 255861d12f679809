"""Triton's trace file from a real server process: every timestamp of a request over HTTP
and gRPC, in order; an ensemble's steps and a Python model's BLS calls (made with its
request's trace, in a worker and in process) as children of its trace; level TENSORS; and
``log-frequency`` rotating to indexed files while the server runs."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import write_model

from naiad.testing import naiad_server

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
HTTP_NAMES = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START",
              "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
              "INFER_RESPONSE_COMPLETE", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"]
STEP_NAMES = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
              "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
# How long a test waits for the tracing thread to write a file it was handed, in seconds.
WRITE_WAIT_S = 30.0


def inputs(module):
    tensors = [module.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    tensors[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
    tensors[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    return tensors


def traces(path: Path) -> dict[int, dict]:
    """The file's records by trace id: the model record and the timestamps in file order."""
    by_id: dict[int, dict] = {}
    for record in json.loads(path.read_text()):
        trace = by_id.setdefault(record["id"], {"stamps": [], "tensors": []})
        if "model_name" in record:
            trace["model"] = record
        elif "timestamps" in record:
            trace["stamps"] += [(t["name"], t["ns"]) for t in record["timestamps"]]
        else:
            trace["tensors"].append((record["activity"], record["tensor"]))
    return by_id


def by_request(found: dict[int, dict], request_id: str) -> list[dict]:
    return [t for t in found.values() if t["model"].get("request_id") == request_id]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Requests to a server tracing every one, then the server stopped: its trace file."""
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    with naiad_server("--model-repository", str(EXAMPLES), "--trace-config",
                      f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
                      "--trace-config", "rate=1") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.infer("add_sub", inputs(httpclient), request_id="over-http")
            client.infer("pipeline", inputs(httpclient), request_id="ensemble")
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.infer("add_sub", inputs(grpcclient), request_id="over-grpc")
        assert server.stop() == 0
    text = path.read_text()
    assert text.startswith('[{"id":') and text.endswith("}]")  # the list closed at shutdown
    return traces(path)


def test_an_http_request_has_every_timestamp_in_order(traced):
    [trace] = by_request(traced, "over-http")
    assert trace["model"] == {"id": trace["model"]["id"], "model_name": "add_sub",
                              "model_version": 1, "request_id": "over-http"}
    assert [name for name, _ in trace["stamps"]] == HTTP_NAMES
    times = [ns for _, ns in trace["stamps"]]
    assert times == sorted(times) and times[0] > 0


def test_a_grpc_request_has_the_grpc_timestamps(traced):
    [trace] = by_request(traced, "over-grpc")
    names = [name for name, _ in trace["stamps"]]
    assert names == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *HTTP_NAMES[2:-2],
                     "GRPC_SEND_START", "GRPC_SEND_END"]
    times = [ns for _, ns in trace["stamps"]]
    assert times == sorted(times)


def test_an_ensembles_steps_are_children_of_its_trace(traced):
    family = by_request(traced, "ensemble")
    [parent] = [t for t in family if "parent_id" not in t["model"]]
    steps = sorted((t for t in family if "parent_id" in t["model"]),
                   key=lambda t: dict(t["stamps"])["REQUEST_START"])
    assert parent["model"]["model_name"] == "pipeline"
    assert [s["model"]["model_name"] for s in steps] == ["add_sub", "mul"]
    assert {s["model"]["parent_id"] for s in steps} == {parent["model"]["id"]}
    # The ensemble's own trace has no compute timestamps (as Triton's), its steps all.
    assert [name for name, _ in parent["stamps"]] == [
        "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START",
        "INFER_RESPONSE_COMPLETE", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"]
    outer = dict(parent["stamps"])
    for step in steps:
        assert [name for name, _ in step["stamps"]] == STEP_NAMES
        inner = dict(step["stamps"])
        assert outer["QUEUE_START"] <= inner["REQUEST_START"]
        assert inner["REQUEST_END"] <= outer["REQUEST_END"]
    # mul reads what add_sub wrote: it starts once add_sub's compute is over.
    add_sub, mul = (dict(s["stamps"]) for s in steps)
    assert add_sub["COMPUTE_END"] <= mul["REQUEST_START"]


def test_the_families_are_written_whole_top_trace_first(traced):
    # ``traced`` keeps the file's order: a request's traces together, the top one first.
    order = [(t["model"]["model_name"], t["model"].get("request_id"),
              "child" if "parent_id" in t["model"] else "top") for t in traced.values()]
    assert order == [("add_sub", "over-http", "top"), ("pipeline", "ensemble", "top"),
                     ("add_sub", "ensemble", "child"), ("mul", "ensemble", "child"),
                     ("add_sub", "over-grpc", "top")]


def test_log_frequency_rotates_files_while_serving_and_tensors_are_recorded(tmp_path):
    path = tmp_path / "trace.json"
    with naiad_server("--model-repository", str(EXAMPLES), "--trace-config",
                      f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
                      "--trace-config", "level=TENSORS", "--trace-config", "rate=1",
                      "--trace-config", "triton,log-frequency=2") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            for k in range(3):
                client.infer("add_sub", inputs(httpclient), request_id=f"r{k}")
        first = Path(f"{path}.0")
        deadline = time.monotonic() + WRITE_WAIT_S
        while not first.exists():  # written by the tracing thread once two traces ended
            assert time.monotonic() < deadline, server.log()[-2000:]
            time.sleep(0.05)
        assert [t["model"]["request_id"] for t in traces(first).values()] == ["r0", "r1"]
        assert server.stop() == 0
    assert [t["model"]["request_id"] for t in traces(Path(f"{path}.1")).values()] == ["r2"]
    assert not path.exists()
    trace = next(iter(traces(first).values()))
    assert trace["tensors"] == [
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": "0,1,2,3", "shape": "4",
                                "dtype": "FP32"}),
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT1", "data": "1,1,1,1", "shape": "4",
                                "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT0", "data": "1,2,3,4", "shape": "4",
                                   "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT1", "data": "-1,0,1,2", "shape": "4",
                                   "dtype": "FP32"})]


BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, name)
                      for name in ("INPUT0", "INPUT1")]
            traced = pb_utils.InferenceRequest(
                model_name="add_sub", inputs=inputs, requested_output_names=["OUTPUT0"],
                trace=request.trace()).exec()
            pb_utils.InferenceRequest(  # made without the trace: not traced
                model_name="add_sub", inputs=inputs,
                requested_output_names=["OUTPUT1"]).exec()
            out = pb_utils.get_output_tensor_by_name(traced, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", out.astype(np.float32))]))
        return responses
"""


def bls_config(name: str, mode: str) -> str:
    return f"""
name: "{name}"
backend: "python"
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }}
]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{mode}" }} }}
"""


def test_bls_calls_made_with_the_requests_trace_are_its_children(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "add_sub", repo / "add_sub")
    for mode in ("isolated", "in_process"):
        write_model(repo, f"bls_{mode}", bls_config(f"bls_{mode}", mode), BLS_PY)
    path = tmp_path / "trace.json"
    with naiad_server("--model-repository", str(repo), "--trace-config",
                      f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
                      "--trace-config", "rate=1") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            for mode in ("isolated", "in_process"):
                result = client.infer(f"bls_{mode}", inputs(httpclient), request_id=mode)
                assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]
        assert server.stop() == 0
    found = traces(path)
    for mode in ("isolated", "in_process"):
        [parent] = [t for t in by_request(found, mode) if "parent_id" not in t["model"]]
        children = [t for t in found.values() if t["model"].get("parent_id")
                    == parent["model"]["id"]]
        assert parent["model"]["model_name"] == f"bls_{mode}"
        assert [c["model"]["model_name"] for c in children] == ["add_sub"], mode
        [child] = children
        assert [name for name, _ in child["stamps"]] == STEP_NAMES
        outer, inner = dict(parent["stamps"]), dict(child["stamps"])
        # The call runs while its caller computes.
        assert outer["COMPUTE_START"] <= inner["REQUEST_START"]
        assert inner["REQUEST_END"] <= outer["COMPUTE_END"]
    assert len(found) == 4  # the calls made without the trace were not traced
