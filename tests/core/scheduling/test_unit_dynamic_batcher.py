"""The dynamic batcher in process: the batch rule, merge and split, ordering, adaptive waits.

The batcher runs here with real instance worker threads and a small framework-style model
instance that merges its batch into one array per input (naiad.batching), as the ONNX and
PyTorch backends do, so the property tests cover the whole merge -> execute -> split path.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.batching import batch_sizes, merge_inputs, split_outputs
from naiad.metrics.stats import ModelStats
from naiad.scheduling.adaptive import AdaptiveWait, adaptive_enabled
from naiad.scheduling.base import SchedulingContext
from naiad.scheduling.batch_policy import Cut, CutReason, cut_batch
from naiad.scheduling.dynamic import DynamicBatcher
from naiad.scheduling.worker import InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance, Tensor

# --- the batch rule -----------------------------------------------------------------------


class Item:
    def __init__(self, rows: int = 1, key: object = "a", enqueue_ns: int = 0) -> None:
        self.rows = rows
        self.shape_key = key
        self.enqueue_ns = enqueue_ns


def cut(items: list[Item], max_batch: int = 8, preferred: tuple[int, ...] = (),
        delay_ns: int = 0, now_ns: int = 0) -> Cut:
    return cut_batch(items, max_batch, set(preferred), max(preferred, default=max_batch),
                     delay_ns, now_ns)


def test_without_delay_everything_queued_goes_at_once():
    assert cut([Item(), Item(), Item()]) == Cut(3, 0, CutReason.QUEUE_EMPTY)


def test_batch_stops_at_max_batch_size():
    decision = cut([Item(3), Item(3), Item(3)], max_batch=8)
    assert decision == Cut(2, 0, CutReason.MAX_BATCH_SIZE)


def test_batch_stops_before_a_request_with_other_shapes():
    decision = cut([Item(key="a"), Item(key="a"), Item(key="b"), Item(key="a")],
                   delay_ns=10**9)
    assert decision == Cut(2, 0, CutReason.SHAPES_DIFFER)


def test_preferred_size_goes_before_the_delay():
    decision = cut([Item(), Item(), Item()], preferred=(2, 6), delay_ns=10**9, now_ns=5)
    # 2 is preferred, 3 is not and cannot reach 6 without waiting: send the 2 now.
    assert decision == Cut(2, 0, CutReason.PREFERRED_SIZE)


def test_short_of_a_preferred_size_waits_for_the_oldest_request_delay():
    decision = cut([Item(enqueue_ns=100), Item(enqueue_ns=50)], preferred=(4,),
                   delay_ns=1000, now_ns=200)
    assert decision == Cut(2, 1050, None)


def test_expired_delay_sends_everything_pending():
    decision = cut([Item(enqueue_ns=0)] * 3, preferred=(2,), delay_ns=1000, now_ns=1000)
    assert decision == Cut(3, 0, CutReason.DELAY_EXPIRED)


def test_overflowing_the_largest_preferred_size_sends_what_fits():
    decision = cut([Item(3), Item(3)], max_batch=8, preferred=(4,), delay_ns=10**9)
    assert decision == Cut(1, 0, CutReason.PREFERRED_SIZE)


def test_a_full_batch_without_preferred_sizes_is_cut_for_max_batch_size():
    # the next request would overflow max_batch_size (the largest "preferred" size)
    assert cut([Item(4), Item(4), Item(1)], max_batch=8, delay_ns=10**9) == Cut(
        2, 0, CutReason.MAX_BATCH_SIZE)
    # a single request as large as max_batch_size
    assert cut([Item(8)], max_batch=8, delay_ns=10**9) == Cut(1, 0, CutReason.MAX_BATCH_SIZE)


def test_cut_reasons_are_a_small_fixed_set_of_label_values():
    labels = [reason.label for reason in CutReason]
    assert len(set(labels)) == len(labels) == 7
    assert all(label.isidentifier() and label.islower() for label in labels)


# --- merge and split ----------------------------------------------------------------------

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def request_of(arrays: dict[str, np.ndarray]) -> InferenceRequest:
    return InferenceRequest("m", 1, {name: Tensor(name, "FP32", a.shape, a)
                                     for name, a in arrays.items()})


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES),
       inner=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
       rows=st.lists(st.integers(1, 4), min_size=1, max_size=6))
def test_merge_then_split_gives_each_request_its_own_rows(data, dtype, inner, rows):
    arrays = [data.draw(hnp.arrays(dtype, (r, *inner))) for r in rows]
    requests = [request_of({"X": a, "Y": a[..., None]}) for a in arrays]
    merged = merge_inputs(requests, ["X", "Y"])
    assert merged["X"].shape == (sum(rows), *inner)
    sizes = batch_sizes(requests)
    assert sizes == rows
    back = split_outputs(merged, sizes)
    for original, part in zip(arrays, back, strict=True):
        np.testing.assert_array_equal(part["X"], original)
        np.testing.assert_array_equal(part["Y"], original[..., None])


def test_split_hands_out_views_not_copies():
    merged = {"X": np.arange(12, dtype=np.float32).reshape(6, 2)}
    parts = split_outputs(merged, [2, 4])
    assert all(np.shares_memory(part["X"], merged["X"]) for part in parts)


def test_a_lone_request_is_not_copied():
    x = np.ones((2, 3), np.float32)
    assert merge_inputs([request_of({"X": x})], ["X"])["X"] is x


def test_split_refuses_outputs_that_do_not_add_up():
    with pytest.raises(ValueError, match="needs 3 rows"):
        split_outputs({"OUT": np.zeros((2, 1))}, [1, 2])


def test_merge_refuses_an_optional_input_present_in_only_some_requests():
    x = np.ones((1, 2), np.float32)
    with pytest.raises(ValueError, match="'Y' is present in only some"):
        merge_inputs([request_of({"X": x, "Y": x}), request_of({"X": x})], ["X", "Y"])


# --- the batcher with real worker threads -------------------------------------------------


class MergingInstance(ModelInstance):
    """Doubles every input after merging the batch, as a framework backend would."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.batches: list[int] = []
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        with self.lock:
            self.batches.append(len(requests))
        if self.delay_s:
            time.sleep(self.delay_s)
        merged = merge_inputs(requests, ["X"])
        parts = split_outputs({"Y": merged["X"] * 2}, batch_sizes(requests))
        return [InferenceResponse(outputs=[Tensor("Y", "FP32", p["Y"].shape, p["Y"])])
                for p in parts]


async def make_batcher(config_text: str, instances: list[ModelInstance]) -> DynamicBatcher:
    from google.protobuf import text_format

    config = text_format.Parse(config_text, ModelConfig())
    workers = []
    for index, instance in enumerate(instances):
        worker = InstanceWorker(InstanceInfo(f"m_{index}", "KIND_CPU", 0, index), "m")
        await worker.load(lambda instance=instance: instance)
        workers.append(worker)
    context = SchedulingContext("m", 1, config, workers, ModelStats("m", 1))
    return DynamicBatcher(context)


def stop(batcher: DynamicBatcher) -> None:
    for worker in batcher._idle:
        worker.stop()


def infer_request(x: np.ndarray) -> InferenceRequest:
    request = request_of({"X": x})
    request.arrival_ns = time.perf_counter_ns()
    return request


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.int64, np.uint8, np.float16]),
       widths=st.lists(st.integers(1, 3), min_size=1, max_size=12))
def test_batched_requests_each_get_exactly_their_own_rows(data, dtype, widths):
    arrays = [data.draw(hnp.arrays(dtype, (data.draw(st.integers(1, 3)), w),
                                   elements={"min_value": 0, "max_value": 50}))
              for w in widths]

    async def run() -> list[InferenceResponse]:
        instance = MergingInstance(delay_s=0.002)
        batcher = await make_batcher("max_batch_size: 8 dynamic_batching { }", [instance])
        try:
            return await asyncio.gather(*(asyncio.wrap_future(batcher.submit(infer_request(a)))
                                         for a in arrays))
        finally:
            await batcher.drain()
            stop(batcher)

    responses = asyncio.run(run())
    for array, response in zip(arrays, responses, strict=True):
        assert response.error is None
        np.testing.assert_array_equal(response.outputs[0].data, array * 2)


async def test_preserve_ordering_answers_in_arrival_order():
    slow, fast = MergingInstance(delay_s=0.3), MergingInstance()
    batcher = await make_batcher(
        "max_batch_size: 1 dynamic_batching { preserve_ordering: true }", [slow, fast])
    answered: list[int] = []

    async def one(i: int) -> None:
        await asyncio.wrap_future(batcher.submit(infer_request(np.full((1, 1), i, np.float32))))
        answered.append(i)

    try:
        await asyncio.gather(one(0), one(1), one(2))
    finally:
        stop(batcher)
    # Request 0 ran on the slow instance; 1 and 2 finished first but wait their turn.
    assert answered == [0, 1, 2]


async def test_without_preserve_ordering_fast_answers_go_first():
    slow, fast = MergingInstance(delay_s=0.3), MergingInstance()
    batcher = await make_batcher("max_batch_size: 1 dynamic_batching { }", [slow, fast])
    answered: list[int] = []

    async def one(i: int) -> None:
        await asyncio.wrap_future(batcher.submit(infer_request(np.full((1, 1), i, np.float32))))
        answered.append(i)

    try:
        await asyncio.gather(one(0), one(1), one(2))
    finally:
        stop(batcher)
    assert answered[-1] == 0


async def test_a_cancelled_queued_request_never_executes():
    instance = MergingInstance(delay_s=0.2)
    batcher = await make_batcher("max_batch_size: 1 dynamic_batching { }", [instance])
    try:
        first = batcher.submit(infer_request(np.ones((1, 1), np.float32)))
        await asyncio.sleep(0.05)
        second = batcher.submit(infer_request(np.ones((1, 1), np.float32)))
        assert batcher.pending() == 1
        assert second.cancel()
        await asyncio.wrap_future(first)
        await batcher.drain()
        assert batcher.pending() == 0
        assert instance.batches == [1]
        # counted as Triton counts it: a failure for reason CANCELED, no execution
        stats = batcher.stats
        assert (stats.success.count, stats.fail.count, stats.execution_count) == (1, 1, 1)
        assert stats.failures == {"CANCELED": 1}
    finally:
        stop(batcher)


# --- adaptive waits -----------------------------------------------------------------------


def test_adaptive_is_opt_in_by_model_parameter():
    from google.protobuf import text_format

    config = ModelConfig()
    assert not adaptive_enabled(config)
    text_format.Parse('parameters { key: "naiad.adaptive_batching" value { string_value: '
                      '"true" } }', config)
    assert adaptive_enabled(config)


def test_fruitless_waits_back_off_and_a_fruitful_one_resets():
    adaptive = AdaptiveWait(delay_ns=1_000_000)
    wait = Cut(1, 10**12, None)
    adaptive.arrived(0)
    first = adaptive.decide(wait, now_ns=1)
    assert first.wait_until  # the first lone request probes
    adaptive.dispatched(1)  # ...and nobody came
    # so the next one goes at once
    assert adaptive.decide(wait, now_ns=2) == Cut(1, 0, CutReason.ADAPTIVE_BACKOFF)
    skipped = []
    for _ in range(40):  # probes get rarer: 1, 2, 4, 8 ... batches without waiting
        decision = adaptive.decide(wait, now_ns=3)
        skipped.append(decision.wait_until == 0)
        if decision.wait_until:
            adaptive.dispatched(1)
    assert skipped.count(False) <= 5
    # A probe that gains company makes waiting the rule again.
    while adaptive.decide(wait, now_ns=4).wait_until == 0:
        pass
    adaptive.dispatched(3)
    assert adaptive.decide(wait, now_ns=5).wait_until


def test_a_probe_ends_when_arrivals_stop():
    adaptive = AdaptiveWait(delay_ns=10_000_000)
    for t in range(0, 1_000_000, 100_000):  # arrivals every 100 µs
        adaptive.arrived(t)
    wait = Cut(2, 10**12, None)
    decision = adaptive.decide(wait, now_ns=900_001)
    assert 900_000 < decision.wait_until < 900_000 + 10_000_000
    late = adaptive.decide(wait, now_ns=decision.wait_until)
    assert late == Cut(2, 0, CutReason.ADAPTIVE_QUIET)
