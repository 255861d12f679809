"""Unit tests of naiad.metrics.stats' deferred recording: records wait in a pending list and
are folded into the counters at :data:`FOLD_BOUND` records or when anything reads them.
Every reader must see every record, each exactly once, whatever the threads do meanwhile."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from naiad.metrics.config import MetricsConfig
from naiad.metrics.latency_histograms import distributions_for
from naiad.metrics.stats import FOLD_BOUND, ModelStats

MS = 1_000_000  # ns
WRITERS = 4
RECORDS_PER_WRITER = 6000  # many folds by the writers themselves (FOLD_BOUND each)


def _with_histograms() -> ModelStats:
    return ModelStats("m", 1, distributions=distributions_for(MetricsConfig()))


def _pending(stats: ModelStats) -> int:
    return len(stats._pending)  # what waits to be folded (white box: the bound's tests)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond, so that appends land in the middle of folds."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


# --- readers see what is still pending ----------------------------------------------------

def test_every_counter_attribute_sees_pending_records():
    stats = ModelStats("m", 1)
    stats.record_executed_request(True, 2, 900, 100, 0, 700, 50)
    stats.record_executed_request(False, 1, 500, 10, 0, 400, 30)
    assert _pending(stats) == 2  # nothing was folded yet
    assert (stats.inference_count, stats.execution_count) == (2, 2)
    assert _pending(stats) == 0  # the first read folded
    assert (stats.success.count, stats.success.ns) == (1, 900)
    assert (stats.fail.count, stats.fail.ns) == (1, 500)
    assert (stats.queue.ns, stats.compute_infer.ns, stats.compute_output.ns) == (100, 700, 50)
    assert stats.compute_input.count == 1
    assert stats.failures == {"BACKEND": 1}
    assert sorted(stats.batches) == [1, 2]
    assert stats.batches[2].compute_infer.ns == 700
    assert stats.last_inference_ms > 0


def test_each_attribute_read_folds_what_came_since_the_last():
    stats = ModelStats("m", 1)
    counts = []
    for _ in range(3):
        stats.record_request(True, 1, 10, 1, 0, 5, 2)
        counts.append(stats.success.count)
    assert counts == [1, 2, 3]


def test_as_dict_sees_pending_records():
    stats = ModelStats("m", 1)
    stats.record_execution(4, 1, 2, 3)
    stats.record_request(True, 4, 20, 4, 1, 2, 3)
    assert _pending(stats) == 2
    doc = stats.as_dict()
    assert (doc["inference_count"], doc["execution_count"]) == (4, 1)
    assert doc["inference_stats"]["success"] == {"count": 1, "ns": 20}
    assert doc["batch_stats"][0]["batch_size"] == 4


def test_distributions_snapshot_sees_pending_records():
    stats = _with_histograms()
    stats.record_executed_request(True, 3, 2 * MS, MS // 2, 0, MS, 0)
    assert _pending(stats) == 1
    histograms = stats.distributions_snapshot().histograms
    assert histograms["request"].count == 1 and histograms["request"].sum == 2.0
    assert histograms["queue"].count == 1 and histograms["compute_infer"].count == 1
    assert histograms["batch_size"].count == 1 and histograms["batch_size"].sum == 3


def test_executions_of_one_batch_size_in_one_fold_count_in_the_histogram_each():
    stats = _with_histograms()
    for size in (2, 2, 2, 8):
        stats.record_execution(size, 0, 1, 0)
    batch_size = stats.distributions_snapshot().histograms["batch_size"]
    # bounds 1, 2, 4, 8, ...: three in le=2, one more by le=8
    assert batch_size.cumulative[:4] == (0, 3, 3, 4)
    assert (batch_size.count, batch_size.sum) == (4, 14)


# --- the bound ----------------------------------------------------------------------------

def test_records_fold_when_the_bound_is_reached():
    stats = ModelStats("m", 1)
    for _ in range(FOLD_BOUND - 1):
        stats.record_executed_request(True, 1, 10, 1, 0, 5, 2)
    assert _pending(stats) == FOLD_BOUND - 1
    stats.record_request(True, 1, 10, 1, 0, 5, 2)  # the bound-th record: the writer folds
    assert _pending(stats) == 0
    stats.record_execution(1, 0, 5, 2)
    assert _pending(stats) == 1
    assert stats.success.count == FOLD_BOUND
    assert stats.execution_count == FOLD_BOUND


def test_with_summaries_a_request_is_summarized_as_it_ends():
    """A summary's sliding window needs each observation at its own time: a successful
    request goes into the summaries as it is recorded, while its counters and histograms
    still wait for the fold."""
    stats = ModelStats("m", 1, distributions=distributions_for(
        MetricsConfig(summary_latencies=True)))
    stats.record_executed_request(True, 1, 1500_000, 200_000, 0, 1_000_000, 3_000)
    stats.record_request(True, 1, 1500_000, 200_000, 0, 1_000_000, 3_000)
    stats.record_request(False, 1, 9_000_000, 0, 0, 0, 0)  # a failure has no summary
    stats.record_execution(1, 0, 1_000_000, 3_000)
    assert _pending(stats) == 4
    observed = stats.distributions.snapshot().summaries  # as they are, without a fold
    assert (observed["request"].count, observed["request"].sum) == (2, 3000)
    assert (observed["queue"].count, observed["queue"].sum) == (2, 400)
    summaries = stats.distributions_snapshot().summaries  # folds first: the same summaries
    assert (summaries["request"].count, summaries["request"].sum) == (2, 3000)
    assert stats.success.count == 2 and stats.fail.count == 1 and stats.execution_count == 2


# --- last_inference_ms --------------------------------------------------------------------

def test_last_inference_is_the_last_records_time_not_the_folds():
    stats = ModelStats("m", 1)
    stats.record_request(True, 1, 10, 1, 0, 5, 2)
    before = time.time_ns() // MS
    stats.record_executed_request(True, 1, 10, 1, 0, 5, 2)
    after = time.time_ns() // MS
    stats.record_execution(1, 0, 5, 2)  # an execution is not an inference's end
    time.sleep(0.05)
    last = stats.last_inference_ms  # folded now, 50 ms later
    assert before <= last <= after


def test_a_failure_sets_the_last_inference_too():
    stats = ModelStats("m", 1)
    before = time.time_ns() // MS
    stats.record_cancelled(1, time.perf_counter_ns())
    assert before <= stats.as_dict()["last_inference"] <= time.time_ns() // MS


def test_a_cache_hit_after_pending_records_is_the_last_inference():
    stats = ModelStats("m", 1)
    stats.record_request(True, 1, 10, 1, 0, 5, 2)
    time.sleep(0.02)
    before = time.time_ns() // MS
    stats.record_cache_hit(5, 1, 1)  # folds the request first, then counts the hit
    assert before <= stats.last_inference_ms <= time.time_ns() // MS
    assert stats.success.count == 2


# --- threads ------------------------------------------------------------------------------

def _write(stats: ModelStats, writer: int, start: threading.Barrier) -> None:
    """RECORDS_PER_WRITER records, in a cycle of four kinds; ``_expected`` sums them."""
    start.wait()
    for i in range(RECORDS_PER_WRITER):
        kind = i % 4
        if kind == 0:
            stats.record_executed_request(True, 2, 10 + writer, 1, 0, 5, 2)
        elif kind == 1:
            stats.record_executed_request(False, 1, 7, 1, 0, 5, 2)
        elif kind == 2:
            stats.record_execution(3, 1, 5, 2)
        else:
            stats.record_request(True, 3, 20, 2, 1, 5, 2)


def _expected() -> dict:
    cycles = RECORDS_PER_WRITER // 4 * WRITERS
    success_ns = sum(RECORDS_PER_WRITER // 4 * (10 + w) for w in range(WRITERS)) + 20 * cycles
    return {
        "inference_count": 2 * cycles + 3 * cycles,
        "execution_count": 3 * cycles,
        "success": {"count": 2 * cycles, "ns": success_ns},
        "fail": {"count": cycles, "ns": 7 * cycles},
        "queue": {"count": 2 * cycles, "ns": 3 * cycles},
        "compute_input": {"count": 2 * cycles, "ns": cycles},
        "compute_infer": {"count": 2 * cycles, "ns": 10 * cycles},
        "batch_sizes": {1: cycles, 2: cycles, 3: cycles},
    }


def _read_while_writing(stats: ModelStats, done: threading.Event, seen: list[int],
                        problems: list[str]) -> None:
    """Read every view over and over: counts only grow, and what one fold adds together
    (a success's queue and compute times) is seen together."""
    last = 0
    while not done.is_set():
        doc = stats.as_dict()
        counts = doc["inference_stats"]
        if not (counts["success"]["count"] == counts["queue"]["count"]
                == counts["compute_infer"]["count"]):
            problems.append(f"torn fold: {counts}")
        if doc["inference_count"] < last:
            problems.append(f"inference_count went down: {last} -> {doc['inference_count']}")
        last = doc["inference_count"]
        stats.distributions_snapshot()
        seen.append(stats.success.count + stats.fail.count)


def test_records_from_many_threads_are_each_counted_once(frequent_thread_switches: None):
    stats = _with_histograms()
    start = threading.Barrier(WRITERS)
    done = threading.Event()
    seen: list[int] = []
    problems: list[str] = []
    reader = threading.Thread(target=_read_while_writing, args=(stats, done, seen, problems))
    writers = [threading.Thread(target=_write, args=(stats, w, start)) for w in range(WRITERS)]
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert problems == []
    assert len(seen) > 1 and seen == sorted(seen)
    doc, expected = stats.as_dict(), _expected()
    assert (doc["inference_count"], doc["execution_count"]) == (
        expected["inference_count"], expected["execution_count"])
    for key in ("success", "fail", "queue", "compute_input", "compute_infer"):
        assert doc["inference_stats"][key] == expected[key], key
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in doc["batch_stats"]} == (
        expected["batch_sizes"])
    assert stats.failures == {"BACKEND": expected["fail"]["count"]}
    histograms = stats.distributions_snapshot().histograms
    assert histograms["request"].count == expected["success"]["count"]
    assert histograms["batch_size"].count == expected["execution_count"]
