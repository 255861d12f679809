"""The response cache's key, stored form and scheduler, without a server process."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from naiad.errors import InferenceServerError, Status
from naiad.futures import LightFuture
from naiad.metrics.stats import ModelStats
from naiad.response_cache import (
    CachedScheduler,
    decode_response,
    encode_response,
    request_key,
)
from naiad.scheduling.base import Scheduler
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    ResponseCache,
    Tensor,
)


def tensor(name: str, data: np.ndarray, datatype: str = "FP32") -> Tensor:
    return Tensor(name, datatype, tuple(data.shape), data)


def request(a: list[float] | None = None, **changes: object) -> InferenceRequest:
    values = np.array(a or [1, 2, 3, 4], dtype=np.float32)
    req = InferenceRequest("m", 1, {"INPUT0": tensor("INPUT0", values),
                                    "INPUT1": tensor("INPUT1", np.ones(4, np.float32))})
    for name, value in changes.items():
        setattr(req, name, value)
    return req


# --- the key --------------------------------------------------------------------------------


def test_equal_requests_have_equal_keys() -> None:
    assert request_key(request(), 1) == request_key(request(), 1)


@pytest.mark.parametrize("change", [
    "version", "input bytes", "input shape", "input datatype", "input name", "model name",
    "requested outputs", "model parameter",
])
def test_what_can_change_the_result_changes_the_key(change: str) -> None:
    base, version = request(), 1
    other = request()
    if change == "version":
        version = 2
    elif change == "input bytes":
        other = request([1, 2, 3, 5])
    elif change == "input shape":
        data = np.array([[1, 2], [3, 4]], dtype=np.float32)
        other.inputs["INPUT0"] = tensor("INPUT0", data)
    elif change == "input datatype":
        data = np.array([1, 2, 3, 4], dtype=np.float32).view(np.int32)
        other.inputs["INPUT0"] = tensor("INPUT0", data, "INT32")
    elif change == "input name":
        other.inputs = {"INPUT2" if k == "INPUT0" else k: v for k, v in other.inputs.items()}
    elif change == "model name":
        other.model_name = "n"
    elif change == "requested outputs":
        other.requested_outputs = [RequestedOutput("OUTPUT1")]
    elif change == "model parameter":
        other.parameters = {"scale": 2}
    assert request_key(base, 1) != request_key(other, version)


@pytest.mark.parametrize("parameter", [
    {"priority": 1}, {"timeout": 1000}, {"binary_data_output": True},
])
def test_serving_parameters_leave_the_key_alone(parameter: dict) -> None:
    assert request_key(request(parameters=parameter), 1) == request_key(request(), 1)


def test_requested_outputs_are_keyed_whatever_their_order() -> None:
    one = request(requested_outputs=[RequestedOutput("A"), RequestedOutput("B")])
    two = request(requested_outputs=[RequestedOutput("B"), RequestedOutput("A")])
    assert request_key(one, 1) == request_key(two, 1)
    assert request_key(one, 1) != request_key(request(), 1)


def test_naming_every_output_of_the_model_is_naming_none() -> None:
    # Triton keys both requests once (tests/compat/test_compat_cache_key.py); a subset differs.
    outputs = frozenset({"OUTPUT0", "OUTPUT1"})
    every = request(requested_outputs=[RequestedOutput("OUTPUT1"), RequestedOutput("OUTPUT0")])
    some = request(requested_outputs=[RequestedOutput("OUTPUT0")])
    assert request_key(every, 1, outputs) == request_key(request(), 1, outputs)
    assert request_key(some, 1, outputs) != request_key(request(), 1, outputs)


def test_input_order_does_not_matter() -> None:
    one, two = request(), request()
    two.inputs = dict(reversed(list(two.inputs.items())))
    assert request_key(one, 1) == request_key(two, 1)


def test_bytes_inputs_are_keyed_by_their_elements() -> None:
    def strings(*items: bytes) -> InferenceRequest:
        data = np.array(items, dtype=object)
        return InferenceRequest("m", 1, {"S": tensor("S", data, "BYTES")})

    # the same concatenated bytes, split differently: not the same request
    assert request_key(strings(b"ab", b"c"), 1) != request_key(strings(b"a", b"bc"), 1)
    assert request_key(strings(b"ab", b"c"), 1) == request_key(strings(b"ab", b"c"), 1)


# --- the stored form ------------------------------------------------------------------------


def test_a_response_survives_storage() -> None:
    response = InferenceResponse(
        outputs=[
            tensor("F", np.arange(6, dtype=np.float32).reshape(2, 3)),
            tensor("S", np.array([b"x", b"", "é".encode()], dtype=object), "BYTES"),
            tensor("H", np.array([1.5, -2], dtype=ml_dtypes.bfloat16), "BF16"),
            tensor("B", np.array([True, False]), "BOOL"),
            tensor("E", np.zeros((0, 3), dtype=np.int64), "INT64"),
        ],
        parameters={"note": "kept", "n": 3})
    response.outputs[0].parameters = {"p": 1}
    back = decode_response("m", encode_response(response))
    assert back.parameters == {"note": "kept", "n": 3}
    assert [t.name for t in back.outputs] == ["F", "S", "H", "B", "E"]
    for got, sent in zip(back.outputs, response.outputs, strict=True):
        assert (got.datatype, got.shape) == (sent.datatype, sent.shape)
        np.testing.assert_array_equal(got.data, sent.data)
    assert back.outputs[0].parameters == {"p": 1}


def test_parameters_json_cannot_hold_are_not_stored() -> None:
    response = InferenceResponse(outputs=[], parameters={"x": object()})
    assert encode_response(response) is None


@pytest.mark.parametrize("value", [b"", b"something else", b"naiad-response-1\n\x05\x00"])
def test_bytes_this_format_did_not_write_are_refused(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_response("m", value)


def test_a_truncated_value_is_refused() -> None:
    value = encode_response(InferenceResponse(outputs=[tensor("F", np.ones(8, np.float32))]))
    assert value is not None
    with pytest.raises(ValueError, match="truncated"):
        decode_response("m", value[:-4])


# --- the scheduler --------------------------------------------------------------------------


class DictCache(ResponseCache):
    def __init__(self, blocking: bool = False, fail: bool = False) -> None:
        self.blocking = blocking
        self.fail = fail
        self.entries: dict[bytes, bytes] = {}
        self.threads: set[str] = set()

    def lookup(self, key: bytes) -> bytes | None:
        self.threads.add(threading.current_thread().name)
        if self.fail:
            raise ConnectionError("cache down")
        return self.entries.get(key)

    def insert(self, key: bytes, value: bytes) -> None:
        if self.fail:
            raise ConnectionError("cache down")
        self.entries[key] = value


class Echo(Scheduler):
    """Answers at once with INPUT0 as OUTPUT0, or with an error response for a negative."""

    def __init__(self) -> None:
        self.runs = 0

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        self.runs += 1
        future: LightFuture[InferenceResponse] = LightFuture(running=True)
        data = request.inputs["INPUT0"].data
        if (data < 0).any():
            future.set_result(InferenceResponse(error=InferenceServerError("negative")))
        else:
            future.set_result(InferenceResponse(outputs=[tensor("OUTPUT0", data.copy())]))
        return future

    async def drain(self) -> None:
        return None


def scheduler(cache: ResponseCache, io: ThreadPoolExecutor | None = None
              ) -> tuple[CachedScheduler, Echo, ModelStats]:
    inner, stats = Echo(), ModelStats("m", 1)
    return CachedScheduler(inner, cache, 1, stats, io), inner, stats


def test_a_repeated_request_is_a_hit_and_counts_as_triton_counts_it() -> None:
    cached, inner, stats = scheduler(DictCache())
    first = cached.submit(request()).result()
    second = cached.submit(request()).result()
    assert inner.runs == 1
    np.testing.assert_array_equal(second.outputs[0].data, first.outputs[0].data)
    assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 1)
    assert (stats.success.count, stats.queue.count) == (1, 1)  # the hit; the run is the
    assert stats.inference_count == 0  # scheduler's to record, and Echo records nothing


def test_error_responses_are_not_stored() -> None:
    cache = DictCache()
    cached, inner, stats = scheduler(cache)
    for _ in range(2):
        assert cached.submit(request([-1, 0, 0, 0])).result().error is not None
    assert inner.runs == 2 and not cache.entries
    assert (stats.cache_hit.count, stats.cache_miss.count) == (0, 2)


def test_a_failing_cache_is_a_miss_and_the_model_runs() -> None:
    cached, inner, stats = scheduler(DictCache(fail=True))
    for _ in range(2):
        assert cached.submit(request()).result().outputs
    assert inner.runs == 2 and stats.cache_hit.count == 0


def test_a_blocking_cache_is_asked_on_the_io_threads() -> None:
    cache = DictCache(blocking=True)
    # one thread: the insert queued behind the answer has landed once a later job ran
    with ThreadPoolExecutor(1, thread_name_prefix="cache-io") as io:
        cached, inner, _ = scheduler(cache, io)
        cached.submit(request()).result(timeout=5)
        io.submit(lambda: None).result()
        hit = cached.submit(request()).result(timeout=5)
    assert hit.outputs and inner.runs == 1
    assert cache.threads and all(name.startswith("cache-io") for name in cache.threads)


def test_a_blocking_cache_passes_on_a_refusal() -> None:
    class Refusing(Echo):
        def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
            raise InferenceServerError("queue full", Status.UNAVAILABLE)

    with ThreadPoolExecutor(1) as io:
        cached = CachedScheduler(Refusing(), DictCache(blocking=True), 1, ModelStats("m", 1),
                                 io)
        with pytest.raises(InferenceServerError, match="queue full"):
            cached.submit(request()).result(timeout=5)
