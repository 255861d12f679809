"""Triton's trace file, written by the tracing thread from requests the manager sampled:
the records of a trace and their order, compute timestamps rebuilt from the scheduler's
durations, child traces with their parent, level TENSORS, and when the file and its
indexed files (``log-frequency``, ``count``) are written."""

from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from naiad.tracing.exchange import Exchange
from naiad.tracing.manager import TraceManager
from naiad.tracing.settings import DeprecatedFlags, parse_trace_config
from naiad.tracing.tensors import tensor_text
from naiad.types import InferenceRequest, InferenceResponse, Tensor

ADD_SUB = SimpleNamespace(name="add_sub", version=1, config=SimpleNamespace(platform=""))
PIPELINE = SimpleNamespace(name="pipeline", version=1,
                           config=SimpleNamespace(platform="ensemble"))
DURATIONS = (1_000, 0, 50_000, 2_000)  # queued, compute input, infer, output (ns)


def tracer_for(path: Path, *entries: str) -> TraceManager:
    config, _ = parse_trace_config([f"triton,file={path}", "level=TIMESTAMPS", *entries],
                                   DeprecatedFlags())
    return TraceManager(config)


def request(request_id: str = "r1") -> InferenceRequest:
    data = np.array([1.5, -2.0, 0.1, 1e6], dtype=np.float32)
    return InferenceRequest("add_sub", 1, {"INPUT0": Tensor("INPUT0", "FP32", (4,), data)},
                            id=request_id, arrival_ns=1_000_000)


def finish(request: InferenceRequest, future: Future, outputs=()) -> None:
    request.durations = DURATIONS
    future.set_result(InferenceResponse(outputs=list(outputs)))


def run(tracer: TraceManager, model=ADD_SUB, request_id: str = "r1") -> InferenceRequest:
    """One request through admit, watch and completion, as the core does it."""
    infer = request(request_id)
    trace = tracer.admit(model, infer, internal=False)
    if trace is not None:
        future: Future = Future()
        trace.watch(infer, future)
        finish(infer, future)
    return infer


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def stamps(entries: list[dict], trace_id: int) -> list[tuple[str, int]]:
    return [(t["name"], t["ns"]) for e in entries if e["id"] == trace_id
            for t in e.get("timestamps", ())]


def test_a_trace_has_tritons_records_in_order(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1")
    trace_id = run(tracer).trace.id
    tracer.close()
    text = path.read_text()
    assert text.startswith(f'[{{"id":{trace_id},"model_name":"add_sub","model_version":1,'
                           f'"request_id":"r1"}},{{"id":{trace_id},"timestamps":[{{"name":'
                           f'"REQUEST_START","ns":1000000}}]}}') and text.endswith("}]")
    entries = records(path)
    names = [name for name, _ in stamps(entries, trace_id)]
    assert names == ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
                     "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
    ns = dict(stamps(entries, trace_id))
    # The compute timestamps are the arrival plus the scheduler's durations, exactly.
    assert ns["COMPUTE_START"] == 1_000_000 + 1_000 == ns["COMPUTE_INPUT_END"]
    assert ns["COMPUTE_OUTPUT_START"] == ns["COMPUTE_START"] + 50_000
    assert ns["COMPUTE_END"] == ns["COMPUTE_OUTPUT_START"] + 2_000
    assert not Path(f"{path}.0").exists()


def test_the_frontends_timestamps_join_the_top_trace(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1")
    exchange = Exchange("HTTP", [(b"content-type", b"application/json")])
    exchange.mark("RECV_START")
    exchange.enter()
    try:
        infer = request()
        trace = tracer.admit(ADD_SUB, infer, internal=False)
    finally:
        exchange.leave()
    future: Future = Future()
    trace.watch(infer, future)
    finish(infer, future)
    exchange.mark("SEND_START")
    exchange.end()
    tracer.close()
    names = [name for name, _ in stamps(records(path), trace.id)]
    assert names[0] == "HTTP_RECV_START" and names[-1] == "HTTP_SEND_START"
    assert names.index("INFER_RESPONSE_COMPLETE") < names.index("REQUEST_END")


def test_ensemble_steps_are_children_written_with_their_parent(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1")
    parent_request = request("ens")
    parent = tracer.admit(PIPELINE, parent_request, internal=False)
    parent_future: Future = Future()
    parent.watch(parent_request, parent_future)
    for _ in range(2):
        step = request("ens")
        child = parent.child(ADD_SUB, step)
        step_future: Future = Future()
        child.watch(step, step_future)
        finish(step, step_future)
    finish(parent_request, parent_future)
    tracer.close()
    entries = records(path)
    models = [e for e in entries if "model_name" in e]
    assert models == [
        {"id": parent.id, "model_name": "pipeline", "model_version": 1, "request_id": "ens"},
        {"id": parent.id + 1, "model_name": "add_sub", "model_version": 1, "request_id": "ens",
         "parent_id": parent.id},
        {"id": parent.id + 2, "model_name": "add_sub", "model_version": 1, "request_id": "ens",
         "parent_id": parent.id}]
    # An ensemble's own trace has no compute timestamps; its steps have all of them.
    assert [name for name, _ in stamps(entries, parent.id)] == [
        "REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert "COMPUTE_END" in dict(stamps(entries, parent.id + 2))


def test_a_family_is_written_when_its_last_part_ends(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1", "triton,log-frequency=1")
    parent_request = request()
    parent = tracer.admit(PIPELINE, parent_request, internal=False)
    parent_future: Future = Future()
    parent.watch(parent_request, parent_future)
    step = request()
    child = parent.child(ADD_SUB, step)
    step_future: Future = Future()
    child.watch(step, step_future)
    finish(parent_request, parent_future)  # a failed ensemble answers before its step ends
    tracer.flush()
    assert not Path(f"{path}.0").exists()
    finish(step, step_future)
    tracer.flush()
    assert {e["id"] for e in records(Path(f"{path}.0"))} == {parent.id, child.id}
    tracer.close()


def test_log_frequency_rotates_to_indexed_files(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1", "triton,log-frequency=2")
    first = run(tracer).trace.id
    run(tracer)
    tracer.flush()
    assert {e["id"] for e in records(Path(f"{path}.0"))} == {first, first + 1}
    run(tracer)
    tracer.flush()
    assert not Path(f"{path}.1").exists()  # the rest waits for the next two, or shutdown
    tracer.close()
    assert {e["id"] for e in records(Path(f"{path}.1"))} == {first + 2}
    assert not path.exists()


def test_count_stops_tracing_and_writes_its_traces_at_once(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1", "count=2")
    traced = [run(tracer).trace is not None for _ in range(3)]
    assert traced == [True, True, False]
    assert dict(tracer.view())["trace_count"] == ["0"]
    tracer.flush()
    assert len({e["id"] for e in records(Path(f"{path}.0"))}) == 2
    tracer.close()
    assert not path.exists()


def test_rate_samples_one_request_in_n(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=2")
    assert [run(tracer, request_id=f"r{k}").trace is not None for k in range(4)] == \
        [False, True, False, True]
    tracer.close()
    assert [e["request_id"] for e in records(path) if "model_name" in e] == ["r1", "r3"]


def test_a_replaced_setting_writes_what_it_holds(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1", "count=5")
    run(tracer)  # held until 5 are made...
    tracer.flush()
    assert not path.exists()
    tracer.update("", {"trace_rate": "2"})  # ...or the setting is replaced
    tracer.flush()
    assert path.read_text().startswith('[{"id":')  # the list is closed at shutdown
    tracer.close()
    assert len({e["id"] for e in records(path)}) == 1


def test_internal_requests_and_requests_with_a_trace_are_not_sampled(tmp_path):
    tracer = tracer_for(tmp_path / "t.json", "rate=1")
    assert tracer.admit(ADD_SUB, request(), internal=True) is None
    traced = request()
    traced.trace = object()  # type: ignore[assignment]
    assert tracer.admit(ADD_SUB, traced, internal=False) is None
    tracer.close()


def test_tensors_level_records_inputs_and_outputs(tmp_path):
    path = tmp_path / "trace.json"
    tracer = tracer_for(path, "rate=1", "level=TENSORS")
    infer = request()
    trace = tracer.admit(ADD_SUB, infer, internal=False)
    future: Future = Future()
    trace.watch(infer, future)
    finish(infer, future, [Tensor("OUTPUT0", "BYTES", (2,),
                                  np.array([b"ab", b"c"], dtype=np.object_))])
    tracer.close()
    entries = records(path)
    tensors = [(e["activity"], e["tensor"]) for e in entries if "activity" in e]
    assert tensors == [
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": "1.5,-2,0.1,1e+06", "shape": "4",
                                "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT0", "data": '"ab","c"', "shape": "2",
                                   "dtype": "BYTES"})]
    order = [e.get("activity") or e.get("timestamps", [{}])[0].get("name") for e in entries
             if "model_name" not in e]
    assert order.index("TENSOR_QUEUE_INPUT") == order.index("QUEUE_START") + 1
    assert order.index("TENSOR_BACKEND_OUTPUT") == order.index("COMPUTE_END") - 1


@pytest.mark.parametrize(("datatype", "values", "text"), [
    ("FP64", [0.5, float("nan"), -0.0, 123456789.0], "0.5,nan,-0,1.23457e+08"),
    ("INT64", [-1, 2**40], f"-1,{2**40}"),
    ("UINT8", [0, 255], "0,255"),
    ("BOOL", [True, False], "1,0"),
    ("FP16", [1.0], ""),
])
def test_tensor_values_are_written_as_triton_writes_them(datatype, values, text):
    dtype = {"FP64": np.float64, "INT64": np.int64, "UINT8": np.uint8, "BOOL": np.bool_,
             "FP16": np.float16}[datatype]
    assert tensor_text(datatype, np.array(values, dtype=dtype)) == text


def test_an_unwritable_file_is_logged_and_tracing_goes_on(tmp_path, caplog):
    folder = tmp_path / "gone"
    folder.mkdir()
    tracer = tracer_for(folder / "t.json", "rate=1")
    folder.rmdir()
    run(tracer)
    tracer.close()
    assert "failed writing trace file" in caplog.text
