"""Unit tests of naiad.metrics.stats: what a request and an execution add, and the JSON form
(Triton's statistics extension, tests/compat/TRITON_OBSERVED.md fact 11)."""

from __future__ import annotations

import time

from naiad.metrics.stats import Duration, ModelStats

DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
             "cache_hit", "cache_miss")


def zero() -> dict[str, int]:
    return {"count": 0, "ns": 0}


def test_fresh_stats_match_tritons_json_exactly():
    assert ModelStats("add_sub", 1).as_dict() == {
        "name": "add_sub",
        "version": "1",
        "last_inference": 0,
        "inference_count": 0,
        "execution_count": 0,
        "inference_stats": {key: zero() for key in DURATIONS},
        "response_stats": {},
        "batch_stats": [],
        "memory_usage": [],
    }


def test_json_key_order_matches_triton():
    doc = ModelStats("m", 3).as_dict()
    assert list(doc) == ["name", "version", "last_inference", "inference_count",
                         "execution_count", "inference_stats", "response_stats", "batch_stats",
                         "memory_usage"]
    assert list(doc["inference_stats"]) == list(DURATIONS)


def test_version_is_a_string():
    assert ModelStats("m", 12).as_dict()["version"] == "12"


def test_duration_add_counts_and_sums():
    d = Duration()
    d.add(100)
    d.add(50, count=3)
    assert (d.count, d.ns) == (4, 150)


def test_one_successful_request_of_one_execution():
    stats = ModelStats("add_sub", 1)
    before = time.time_ns() // 1_000_000
    stats.record_execution(1, input_ns=10, infer_ns=20, output_ns=30)
    stats.record_request(True, 1, total_ns=100, queue_ns=5, input_ns=10, infer_ns=20,
                         output_ns=30)
    after = time.time_ns() // 1_000_000
    doc = stats.as_dict()
    assert before <= doc["last_inference"] <= after
    assert doc["inference_count"] == 1
    assert doc["execution_count"] == 1
    s = doc["inference_stats"]
    assert s["success"] == {"count": 1, "ns": 100}
    assert s["queue"] == {"count": 1, "ns": 5}
    assert s["compute_input"] == {"count": 1, "ns": 10}
    assert s["compute_infer"] == {"count": 1, "ns": 20}
    assert s["compute_output"] == {"count": 1, "ns": 30}
    assert s["fail"] == zero() and s["cache_hit"] == zero() and s["cache_miss"] == zero()
    assert doc["batch_stats"] == [{"batch_size": 1, "compute_input": {"count": 1, "ns": 10},
                                   "compute_infer": {"count": 1, "ns": 20},
                                   "compute_output": {"count": 1, "ns": 30}}]


def test_inference_count_counts_batch_elements_execution_count_executions():
    stats = ModelStats("identity_batch", 1)
    stats.record_execution(2, 1, 1, 1)
    stats.record_request(True, 2, 10, 1, 1, 1, 1)
    doc = stats.as_dict()
    assert doc["inference_count"] == 2
    assert doc["execution_count"] == 1
    assert doc["inference_stats"]["success"]["count"] == 1
    assert [b["batch_size"] for b in doc["batch_stats"]] == [2]


def test_failed_request_counts_only_as_a_failure():
    stats = ModelStats("raises", 1)
    stats.record_execution(1, 3, 4, 5)
    stats.record_request(False, 1, total_ns=70, queue_ns=5, input_ns=3, infer_ns=4,
                         output_ns=5)
    doc = stats.as_dict()
    assert doc["inference_count"] == 0
    assert doc["execution_count"] == 1
    s = doc["inference_stats"]
    assert s["fail"] == {"count": 1, "ns": 70}
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert s[key] == zero(), key
    assert doc["batch_stats"][0]["batch_size"] == 1
    assert doc["last_inference"] > 0


def test_batch_stats_accumulate_per_batch_size_sorted():
    stats = ModelStats("m", 1)
    stats.record_execution(4, 10, 100, 1000)
    stats.record_execution(1, 1, 2, 3)
    stats.record_execution(4, 20, 200, 2000)
    batches = stats.as_dict()["batch_stats"]
    assert [b["batch_size"] for b in batches] == [1, 4]
    assert batches[1] == {"batch_size": 4, "compute_input": {"count": 2, "ns": 30},
                          "compute_infer": {"count": 2, "ns": 300},
                          "compute_output": {"count": 2, "ns": 3000}}
    assert stats.execution_count == 3


def test_several_requests_in_one_execution():
    stats = ModelStats("m", 1)
    stats.record_execution(3, 9, 9, 9)
    for _ in range(3):
        stats.record_request(True, 1, 10, 1, 3, 3, 3)
    doc = stats.as_dict()
    assert doc["inference_count"] == 3
    assert doc["execution_count"] == 1
    assert doc["inference_stats"]["success"] == {"count": 3, "ns": 30}



def test_an_executed_request_adds_what_its_execution_and_its_request_add():
    """record_executed_request (the default scheduler's one request per execution) is
    record_execution then record_request, for a success and for a failure."""
    for ok in (True, False):
        together, apart = ModelStats("m", 1), ModelStats("m", 1)
        together.record_executed_request(ok, 2, 900, 100, 0, 700, 50)
        together.record_executed_request(ok, 1, 500, 10, 0, 400, 30)
        for batch, total, queued, infer, output in ((2, 900, 100, 700, 50),
                                                    (1, 500, 10, 400, 30)):
            apart.record_execution(batch, 0, infer, output)
            apart.record_request(ok, batch, total, queued, 0, infer, output)
        counted, expected = together.as_dict(), apart.as_dict()
        assert counted.pop("last_inference") > 0 and expected.pop("last_inference") > 0
        assert counted == expected  # (the two clocks were read at different times)
        assert together.failures == apart.failures
