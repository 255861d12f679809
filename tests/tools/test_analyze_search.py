"""naiad analyze's search space, objective, constraints and searches, without a server."""

from __future__ import annotations

import copy

import pytest
from analyze_fakes import MLP_CONFIG

from naiad_perf.analyze.candidates import SearchSpace, SweepBounds, describe, key
from naiad_perf.analyze.scoring import (
    CandidateResult,
    Constraints,
    Objective,
    Point,
    better,
    judge,
    pareto_front,
)
from naiad_perf.analyze.search import brute_search, quick_search

BOUNDS = SweepBounds(max_instance_count=3, max_batch_size=8, queue_delays_us=(0, 100),
                     max_thread_count=2)


def python_config(max_batch_size: int = 8) -> dict:
    config = copy.deepcopy(MLP_CONFIG)
    config.update(backend="python", platform="", max_batch_size=max_batch_size)
    return config


def point(concurrency: int, throughput: float, p99_ms: float) -> Point:
    return Point(concurrency, throughput, p99_ms, p99_ms, p99_ms, p99_ms, p99_ms, 0.0, 0.0,
                 0, True)


def test_no_gpu_on_the_server_means_every_candidate_is_kind_cpu():
    config = copy.deepcopy(MLP_CONFIG)
    config["instance_group"] = [{"kind": "KIND_GPU", "count": 2, "gpus": [0]}]
    space = SearchSpace.build(config, gpu_count=0, bounds=BOUNDS)
    kinds = {group["kind"] for candidate in space.grid()
             for group in space.config_for(candidate)["instance_group"]}
    assert kinds == {"KIND_CPU"}
    assert any("no GPU" in note for note in space.notes)
    assert space.default()["instance_count"] == 2


def test_a_gpu_model_on_a_gpu_server_keeps_its_gpus():
    config = copy.deepcopy(MLP_CONFIG)
    config["instance_group"] = [{"kind": "KIND_GPU", "count": 1, "gpus": [1]}]
    space = SearchSpace.build(config, gpu_count=2, bounds=BOUNDS)
    group = space.config_for(space.default())["instance_group"]
    assert group == [{"count": 1, "kind": "KIND_GPU", "gpus": [1]}]


def test_candidate_configs_carry_batching_and_thread_settings():
    space = SearchSpace.build(MLP_CONFIG, gpu_count=0, bounds=BOUNDS)
    names = [d.name for d in space.dimensions]
    assert names == ["instance_count", "dynamic_batching", "max_batch_size",
                     "max_queue_delay_us", "preferred_batch_size", "intra_op_thread_count",
                     "inter_op_thread_count"]
    default = space.default()
    assert "max_queue_delay_us" not in default  # dynamic batching is off in the model
    plain = space.config_for(default)
    assert "dynamic_batching" not in plain and plain["parameters"] == {}
    assert plain["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    tuned = space.normalise({"instance_count": 3, "dynamic_batching": 1, "max_batch_size": 4,
                             "max_queue_delay_us": 100, "preferred_batch_size": 4,
                             "intra_op_thread_count": 2})
    config = space.config_for(tuned)
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 100,
                                          "preferred_batch_size": [4]}
    assert config["max_batch_size"] == 4
    assert config["parameters"] == {"intra_op_thread_count": {"string_value": "2"}}
    assert describe(tuned) == "inst=3 dyn=1 mbs=4 delay_us=100 pref=4 intra_op_thread_count=2"
    assert not space.valid({**tuned, "preferred_batch_size": 8})
    assert MLP_CONFIG["parameters"] == {}  # the original is never changed


def test_python_models_sweep_instances_and_batching_but_no_threads():
    space = SearchSpace.build(python_config(), gpu_count=0, bounds=BOUNDS)
    assert [d.name for d in space.dimensions][-1] == "preferred_batch_size"
    unbatched = SearchSpace.build(python_config(0), gpu_count=0, bounds=BOUNDS)
    assert [d.name for d in unbatched.dimensions] == ["instance_count"]
    assert [key(c) for c in unbatched.grid()] == [
        "instance_count=1", "instance_count=2", "instance_count=3"]


def test_the_grid_is_unique_valid_and_starts_at_the_default():
    space = SearchSpace.build(python_config(), gpu_count=0, bounds=BOUNDS)
    grid = list(space.grid())
    keys = [key(c) for c in grid]
    assert keys[0] == key(space.default())
    # one setting changed comes before two: 3 other sizes, 2 other counts, batching on
    assert {c["instance_count"] != 1 or c["max_batch_size"] != 8 or c["dynamic_batching"]
            for c in grid[1:7]} == {True}
    assert "instance_count=1,dynamic_batching=1,max_batch_size=8,max_queue_delay_us=0," \
           "preferred_batch_size=0" in keys[1:7]
    assert all(sum(c.get(n) != d for n, d in (("instance_count", 1), ("max_batch_size", 8),
                                              ("dynamic_batching", 0))) == 1
               for c in grid[1:7])
    assert len(keys) == len(set(keys))
    assert all(space.valid(c) for c in grid)
    # 3 counts x 4 sizes without batching; with it also 2 delays x valid preferred sizes
    assert len(grid) == 3 * 4 + 3 * 2 * sum(1 + sum(p <= m for p in (1, 2, 4, 8))
                                            for m in (1, 2, 4, 8))


def test_objective_parsing_and_weights():
    assert Objective.parse("throughput").weights == {"throughput": 1.0}
    assert Objective.parse("throughput=2,latency=1").weights == {"throughput": 2.0,
                                                                 "latency": 1.0}
    for bad in ("speed", "latency=x", "memory=-1", "throughput=0"):
        with pytest.raises(ValueError, match="--objective"):
            Objective.parse(bad)
    latency = Objective.parse("latency")
    assert latency.score(point(1, 10, 2.0), None) > latency.score(point(1, 1000, 4.0), None)


def test_a_candidate_is_judged_by_its_best_point_within_the_constraints():
    result = CandidateResult("k", {}, {}, [point(1, 100, 5), point(4, 300, 20),
                                           point(8, 320, 60)], memory_mb=100)
    throughput = Objective.parse("throughput")
    verdict = judge(result, Constraints(max_latency_p99_ms=30), throughput)
    assert verdict.feasible and verdict.best.concurrency == 4
    assert judge(result, Constraints(), throughput).best.concurrency == 8
    failing = judge(result, Constraints(max_latency_p99_ms=1), throughput)
    assert not failing.feasible and "p99" in failing.violations[0]
    heavy = judge(result, Constraints(max_memory_mb=50), throughput)
    assert not heavy.feasible and heavy.violations == ["memory 100 MB > 50 MB"]
    assert better(verdict, failing, 0.02) and not better(failing, verdict, 0.02)
    broken = judge(CandidateResult("b", {}, {}, error="load failed: x"), Constraints(),
                   throughput)
    assert broken.best is None and not better(broken, failing, 0.0)


def test_pareto_front():
    pairs = [(100, 5), (300, 20), (200, 30), (320, 60), (50, 4)]
    assert pareto_front(pairs) == [4, 0, 1, 3]


def evaluator(space: SearchSpace, capacity):
    """Judge candidates by a throughput function of the candidate; record the order."""
    order = []

    def evaluate(candidate):
        order.append(key(candidate))
        rate = capacity(candidate)
        result = CandidateResult(key(candidate), candidate, space.config_for(candidate),
                                 [point(4, rate, 4000 / rate)])
        return judge(result, Constraints(max_latency_p99_ms=30), Objective.parse("throughput"))

    return evaluate, order


def test_quick_search_climbs_one_dimension_at_a_time():
    space = SearchSpace.build(python_config(), gpu_count=0, bounds=BOUNDS)

    def capacity(c):  # instances help up to 2; dynamic batching helps; nothing else does
        return 100.0 * min(c["instance_count"], 2) * (2 if c["dynamic_batching"] else 1)

    evaluate, order = evaluator(space, capacity)
    log = quick_search(space, evaluate, max_candidates=20, min_gain=0.02)
    assert order[:4] == [
        "instance_count=1,dynamic_batching=0,max_batch_size=8",
        "instance_count=2,dynamic_batching=0,max_batch_size=8",
        "instance_count=3,dynamic_batching=0,max_batch_size=8",  # no gain: stop climbing
        "instance_count=2,dynamic_batching=1,max_batch_size=8,max_queue_delay_us=0,"
        "preferred_batch_size=0",
    ]
    assert log.best.result.candidate["instance_count"] == 2
    assert log.best.result.candidate["dynamic_batching"] == 1
    assert log.best.best.throughput == 400
    assert len(order) == len(set(order)) <= 20


def test_quick_search_respects_the_budget_and_brute_search_the_grid_order():
    space = SearchSpace.build(python_config(), gpu_count=0, bounds=BOUNDS)
    evaluate, order = evaluator(space, lambda c: 100.0 * c["instance_count"])
    log = quick_search(space, evaluate, max_candidates=2, min_gain=0.02)
    assert len(order) == 2 and log.best.result.candidate["instance_count"] == 2
    evaluate, order = evaluator(space, lambda c: 100.0 * c["instance_count"])
    log = brute_search(space, evaluate, max_candidates=7, min_gain=0.02)
    assert order == [key(c) for c in list(space.grid())[:7]]
    assert log.skipped == len(list(space.grid())) - 7
    assert log.best.result.candidate["instance_count"] == 3
