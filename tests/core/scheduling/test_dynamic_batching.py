"""The dynamic batcher end to end: tritonclient (HTTP and gRPC) against a real server.

The models report what they saw: ``BATCH`` is the number of requests in the execution that
served a request and ``ORDER`` the execution's sequence number, so the tests read batching
decisions from the responses themselves.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import write_model

from naiad.testing import naiad_server

# Reports, per request, how many requests shared its execution and which execution it was.
# SLEEP_S (a parameter) makes every execution take that long.
REPORTING_PY = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_lock = threading.Lock()
_executions = [0]


class TritonPythonModel:
    def initialize(self, args):
        import json
        params = json.loads(args["model_config"]).get("parameters", {})
        self.sleep = float(params.get("SLEEP_S", {}).get("string_value", "0"))

    def execute(self, requests):
        with _lock:
            _executions[0] += 1
            order = _executions[0]
        shapes = {pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape[1:]
                  for r in requests}
        if len(shapes) > 1:
            raise ValueError(f"one batch mixed input shapes {sorted(shapes)}")
        if self.sleep:
            time.sleep(self.sleep)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            rows = x.shape[0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x),
                pb_utils.Tensor("BATCH", np.full((rows, 1), len(requests), np.int32)),
                pb_utils.Tensor("ORDER", np.full((rows, 1), order, np.int32)),
            ]))
        return responses
"""


def reporting_config(name: str, batching: str, sleep_s: float = 0.0,
                     extra: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }} ]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }},
  {{ name: "BATCH", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "ORDER", data_type: TYPE_INT32, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
dynamic_batching {{ {batching} }}
parameters {{ key: "SLEEP_S" value: {{ string_value: "{sleep_s}" }} }}
{extra}
"""


MODELS = {
    # Everything goes out at once unless an instance is busy.
    "batch_nodelay": reporting_config("batch_nodelay", "", sleep_s=0.2),
    # Waits up to 2 s for a batch of 4.
    "batch_preferred": reporting_config(
        "batch_preferred", "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000"),
    # One slow instance, requests time out after 0.1 s in the queue.
    "batch_timeout": reporting_config(
        "batch_timeout", "default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 100000 }", sleep_s=0.6),
    "batch_override": reporting_config(
        "batch_override", "default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 30000000 allow_timeout_override: true }", sleep_s=0.6),
    "batch_delay_action": reporting_config(
        "batch_delay_action", "default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 100000 }", sleep_s=0.6),
    "batch_small_queue": reporting_config(
        "batch_small_queue", "default_queue_policy { max_queue_size: 1 }", sleep_s=0.6),
    "batch_priority": reporting_config(
        "batch_priority", "priority_levels: 2 default_priority_level: 2", sleep_s=0.5),
    "batch_slow": reporting_config("batch_slow", "", sleep_s=0.8),
    "batch_adaptive": reporting_config(
        "batch_adaptive", "max_queue_delay_microseconds: 2000000",
        extra='parameters { key: "naiad.adaptive_batching" value: { string_value: "true" } }'),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("batching")
    for name, config in MODELS.items():
        write_model(repo, name, config, REPORTING_PY)
    with naiad_server("--model-repository", str(repo), "--log-verbose=1") as process:
        yield process


def _input(rows: int = 1, width: int = 3, value: float = 1.0) -> np.ndarray:
    return np.full((rows, width), value, np.float32)


def _http_infer(url: str, model: str, data: np.ndarray, **kwargs) -> httpclient.InferResult:
    with httpclient.InferenceServerClient(url, network_timeout=30) as client:
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return client.infer(model, [tensor], **kwargs)


def _grpc_infer(url: str, model: str, data: np.ndarray, **kwargs) -> grpcclient.InferResult:
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return client.infer(model, [tensor], **kwargs)


def _stats(server, model: str) -> dict:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return client.get_inference_statistics(model)["model_stats"][0]


def _concurrently(calls, count: int) -> list:
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_share_executions(server, protocol):
    infer = _http_infer if protocol == "http" else _grpc_infer
    url = server.http_url if protocol == "http" else server.grpc_url
    before = _stats(server, "batch_nodelay")
    data = [_input(value=i) for i in range(8)]
    results = _concurrently([lambda d=d: infer(url, "batch_nodelay", d) for d in data], 8)
    for d, result in zip(data, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), d)  # its own rows back
    batches = [int(r.as_numpy("BATCH")[0, 0]) for r in results]
    assert max(batches) > 1, batches
    after = _stats(server, "batch_nodelay")
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 8
    assert executions < inferences
    sizes = {int(b["batch_size"]) for b in after["batch_stats"]}
    assert max(sizes) > 1


def test_preferred_batch_size_goes_before_the_delay(server):
    start = time.monotonic()
    results = _concurrently(
        [lambda i=i: _http_infer(server.http_url, "batch_preferred", _input(value=i))
         for i in range(4)], 4)
    elapsed = time.monotonic() - start
    assert [int(r.as_numpy("BATCH")[0, 0]) for r in results] == [4, 4, 4, 4]
    assert elapsed < 1.5, f"a preferred batch of 4 waited {elapsed:.2f} s (delay is 2 s)"
    stats = _stats(server, "batch_preferred")
    assert [int(b["batch_size"]) for b in stats["batch_stats"]] == [4]


def test_lone_request_waits_out_the_queue_delay(server):
    start = time.monotonic()
    result = _grpc_infer(server.grpc_url, "batch_preferred", _input(rows=2))
    assert time.monotonic() - start >= 1.9
    assert int(result.as_numpy("BATCH")[0, 0]) == 1


def test_requests_with_different_shapes_are_batched_apart(server):
    # Two shapes, four requests each, arriving together: no execution may mix them (the
    # model raises if it does), and each request gets back exactly its own data.
    data = [_input(width=2 if i % 2 else 5, value=i) for i in range(8)]
    results = _concurrently(
        [lambda d=d: _http_infer(server.http_url, "batch_preferred", d) for d in data], 8)
    for d, result in zip(data, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), d)
    orders = {}
    for d, result in zip(data, results, strict=True):
        orders.setdefault(int(result.as_numpy("ORDER")[0, 0]), set()).add(d.shape[1])
    assert all(len(widths) == 1 for widths in orders.values()), orders


def _occupy(url: str, model: str) -> threading.Thread:
    """Start a request that keeps the model's only instance busy, and wait until it runs."""
    thread = threading.Thread(target=_http_infer, args=(url, model, _input()))
    thread.start()
    time.sleep(0.25)
    return thread


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_queue_timeout_rejects(server, protocol):
    busy = _occupy(server.http_url, "batch_timeout")
    infer = _http_infer if protocol == "http" else _grpc_infer
    url = server.http_url if protocol == "http" else server.grpc_url
    with pytest.raises(InferenceServerException) as info:
        infer(url, "batch_timeout", _input())
    busy.join()
    assert info.value.status() in ("503", "StatusCode.UNAVAILABLE")
    assert "Request timeout expired" in info.value.message()
    assert "batch_timeout" in info.value.message()
    # Served normally again once the queue is free.
    _http_infer(server.http_url, "batch_timeout", _input())


def test_client_timeout_overrides_the_queue_policy_downwards(server):
    busy = _occupy(server.http_url, "batch_override")
    with pytest.raises(InferenceServerException) as info:
        _http_infer(server.http_url, "batch_override", _input(), timeout=50_000)
    busy.join()
    assert "Request timeout expired" in info.value.message()


def test_delay_action_serves_late_requests_last(server):
    busy = _occupy(server.http_url, "batch_delay_action")
    late = ThreadPoolExecutor(1).submit(_http_infer, server.http_url, "batch_delay_action",
                                        _input(value=1))
    time.sleep(0.2)  # the first queued request times out (0.1 s) and is delayed
    fresh = ThreadPoolExecutor(1).submit(_http_infer, server.http_url, "batch_delay_action",
                                         _input(value=2))
    busy.join()
    late_order = int(late.result().as_numpy("ORDER")[0, 0])
    fresh_order = int(fresh.result().as_numpy("ORDER")[0, 0])
    # Both are answered (DELAY never rejects); the timed-out request does not go first.
    assert late_order >= fresh_order


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_full_queue_answers_unavailable(server, protocol):
    busy = _occupy(server.http_url, "batch_small_queue")
    queued = ThreadPoolExecutor(1).submit(_http_infer, server.http_url, "batch_small_queue",
                                          _input())
    time.sleep(0.1)
    infer = _http_infer if protocol == "http" else _grpc_infer
    url = server.http_url if protocol == "http" else server.grpc_url
    with pytest.raises(InferenceServerException) as info:
        infer(url, "batch_small_queue", _input())
    assert info.value.status() in ("503", "StatusCode.UNAVAILABLE")
    assert "Exceeds maximum queue size" in info.value.message()
    assert "max_queue_size 1" in info.value.message()
    busy.join()
    queued.result()  # the queued request was not lost


def test_higher_priority_goes_first(server):
    busy = _occupy(server.http_url, "batch_priority")
    pool = ThreadPoolExecutor(2)
    # Different shapes so the two cannot share one batch.
    low = pool.submit(_http_infer, server.http_url, "batch_priority", _input(width=2))
    time.sleep(0.05)
    high = pool.submit(_http_infer, server.http_url, "batch_priority", _input(width=4),
                       priority=1)
    busy.join()
    assert int(high.result().as_numpy("ORDER")[0, 0]) < int(low.result().as_numpy("ORDER")[0, 0])


def test_http_client_gone_is_dropped_from_the_queue(server):
    before = _stats(server, "batch_slow")
    busy = _occupy(server.http_url, "batch_slow")
    body = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]}'
    host, port = server.http_url.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v2/models/batch_slow/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.1)  # queued behind the busy instance; now hang up
    busy.join()
    time.sleep(0.3)
    after = _stats(server, "batch_slow")
    # Only `busy` ran: the abandoned request never executed.
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_count"] - before["inference_count"] == 1


def test_grpc_deadline_drops_the_request(server):
    before = _stats(server, "batch_slow")
    busy = _occupy(server.http_url, "batch_slow")
    with pytest.raises(InferenceServerException) as info:
        _grpc_infer(server.grpc_url, "batch_slow", _input(), client_timeout=0.2)
    assert "Deadline" in str(info.value) or "DEADLINE" in str(info.value.status())
    busy.join()
    time.sleep(0.3)
    after = _stats(server, "batch_slow")
    assert after["execution_count"] - before["execution_count"] == 1  # only `busy` ran
    assert after["inference_count"] - before["inference_count"] == 1


def test_adaptive_mode_stops_waiting_for_company_that_never_comes(server):
    # Triton's semantics would make each of these sequential requests wait 2 s.
    start = time.monotonic()
    for i in range(12):
        result = _http_infer(server.http_url, "batch_adaptive", _input(value=i))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), _input(value=i))
    elapsed = time.monotonic() - start
    assert elapsed < 8, f"12 sequential requests took {elapsed:.1f} s"


def test_verbose_log_says_why_each_batch_was_cut(server):
    _concurrently([lambda i=i: _http_infer(server.http_url, "batch_preferred", _input(value=i))
                   for i in range(4)], 4)
    deadline = time.monotonic() + 5
    while "cut: preferred_size (a preferred batch size was reached)" not in server.log():
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.05)
