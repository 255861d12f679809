"""naiad.metrics.quantiles: exact quantiles over a sliding window, with bounded memory."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naiad.metrics.quantiles import AGE_BUCKETS, WindowQuantiles

S = 1_000_000_000  # ns
QS = (0.0, 0.25, 0.5, 0.9, 0.99, 1.0)


def nearest_rank(values: list[float], q: float) -> float:
    """The textbook nearest-rank quantile: the smallest value with at least q of the values
    at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) - 1e-6))  # 0.9 * 10 is 9.000000000000002
    return ordered[rank - 1]


def test_an_empty_window_answers_nan():
    window = WindowQuantiles(60 * S, 100)
    assert all(math.isnan(v) for v in window.snapshot(0).quantiles(QS))
    assert (window.count, window.sum) == (0, 0)


def test_small_samples_give_the_nearest_rank():
    window = WindowQuantiles(60 * S, 100)
    for value in (5, 1, 4, 2, 3):
        window.observe(value, now_ns=1)
    sample = window.snapshot(now_ns=2)
    # median of five is the third smallest; 0.9 of 5 = 4.5 -> the fifth
    assert sample.quantiles((0.5, 0.9, 0.2, 0.0, 1.0)) == [3, 5, 1, 1, 5]
    assert (sample.count, sample.sum) == (5, 15)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(0, 10**6), min_size=1, max_size=400),
       qs=st.lists(st.integers(0, 1000).map(lambda k: k / 1000), min_size=1, max_size=6))
def test_quantiles_are_exact_while_the_window_holds_every_value(values, qs):
    window = WindowQuantiles(60 * S, 1000)
    for i, value in enumerate(values):
        window.observe(value, now_ns=i * 1000)  # spread over several age buckets' worth
    answers = window.snapshot(now_ns=len(values) * 1000).quantiles(qs)
    assert answers == [nearest_rank(values, q) for q in qs]


def test_values_leave_the_window_after_max_age_in_steps_of_a_fifth():
    window = WindowQuantiles(10 * S, 100)
    window.observe(1000, now_ns=0)  # age bucket [0 s, 2 s)
    window.observe(1, now_ns=5 * S)  # age bucket [4 s, 6 s)
    assert window.snapshot(now_ns=9 * S).quantiles((1.0,)) == [1000]
    # the first bucket began at 0 and lives until 10 s: the 1000 is gone, the 1 stays
    assert window.snapshot(now_ns=10 * S).quantiles((1.0, 0.0)) == [1, 1]
    assert all(math.isnan(v) for v in window.snapshot(now_ns=14 * S).quantiles((0.5,)))
    # count and sum are for ever, as in Prometheus summaries
    assert (window.count, window.sum) == (2, 1001)


def test_an_observation_counts_for_between_four_fifths_of_the_window_and_all_of_it():
    window = WindowQuantiles(10 * S, 100)
    window.observe(7, now_ns=2 * S - 1)  # the end of the bucket that starts at 0
    assert window.snapshot(now_ns=10 * S - 1).quantiles((0.5,)) == [7]  # held 8 s
    assert math.isnan(window.snapshot(now_ns=10 * S).quantiles((0.5,))[0])


def test_memory_is_bounded_and_a_uniform_sample_stands_for_the_rest():
    window = WindowQuantiles(60 * S, 500, rng=random.Random(7))
    values = list(range(100_000))
    random.Random(1).shuffle(values)
    for value in values:
        window.observe(value, now_ns=1)  # all in one age bucket
    sample = window.snapshot(now_ns=2)
    held = sum(len(v) for v, _ in sample.buckets)
    assert held == 500 // AGE_BUCKETS
    median, p90 = sample.quantiles((0.5, 0.9))
    # a uniform sample of 100 values of 0..99999: each within a few percent of the truth
    assert abs(median - 50_000) < 15_000 and abs(p90 - 90_000) < 10_000
    assert (sample.count, sample.sum) == (100_000, sum(values))


def test_buckets_that_were_sampled_weigh_by_what_they_saw():
    window = WindowQuantiles(10 * S, 10, rng=random.Random(3))
    for _ in range(1000):
        window.observe(100, now_ns=0)  # one bucket sees 1000 hundreds and holds 2
    for _ in range(2):
        window.observe(1, now_ns=3 * S)  # another holds both of its ones
    # 1000 hundreds against 2 ones: the median is 100, not the 1 that a plain count of the
    # four held values would give
    assert window.snapshot(now_ns=4 * S).quantiles((0.5, 0.001)) == [100, 1]


@pytest.mark.parametrize(("max_age_ns", "max_samples"), [(0, 100), (S, 4)])
def test_impossible_settings_are_refused(max_age_ns, max_samples):
    with pytest.raises(ValueError):
        WindowQuantiles(max_age_ns, max_samples)
