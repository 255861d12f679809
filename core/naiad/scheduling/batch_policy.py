"""Where to cut the next batch: Triton's dynamic batching rule as a pure function.

Kept apart from the batcher's queues and timers so the rule can be read, and tested, on
its own. Given the queued requests in dispatch order, :func:`cut_batch` answers "send the
first N now, and why" or "wait until T".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple, Protocol


class Queued(Protocol):
    """What the rule needs to know of a queued request."""

    @property
    def rows(self) -> int: ...  # its batch dimension (1 for a model that does not batch)

    @property
    def shape_key(self) -> object: ...  # equal keys may share a batch

    @property
    def enqueue_ns(self) -> int: ...


class Cut(NamedTuple):
    """The decision: send the first ``count`` requests now (``wait_until`` 0) or wait until
    ``wait_until`` (perf_counter_ns) for more. ``reason`` says why a batch was cut."""

    count: int
    wait_until: int
    reason: str


def cut_batch(queued: Sequence[Queued], max_batch_size: int, preferred: Collection[int],
              max_preferred: int, delay_ns: int, now_ns: int) -> Cut:
    """Triton's rule. Walk the queue while the batch can grow: stop at ``max_batch_size``
    or at the first request whose shapes differ (send now). Remember the longest prefix
    that is a preferred size, or that stops short of overflowing the largest preferred
    size. Then: a preferred prefix goes at once unless the oldest request has waited out
    ``delay_ns`` (then everything goes); a batch that cannot grow goes at once; with no
    delay configured everything goes; otherwise wait for the delay to run out."""
    rows = count = best = 0
    stopped = best_reason = ""
    key = queued[0].shape_key
    oldest = queued[0].enqueue_ns
    for item in queued:
        if count:
            if best == 0 and rows + item.rows > max_preferred:
                best = count  # a full preferred batch without this request
                best_reason = f"the next request would exceed batch size {max_preferred}"
            if rows + item.rows > max_batch_size:
                stopped = f"max_batch_size {max_batch_size} reached"
                break
            if item.shape_key != key:
                stopped = "the next request's input shapes differ"
                break
        rows += item.rows
        count += 1
        oldest = min(oldest, item.enqueue_ns)
        if rows in preferred:
            best = count
            best_reason = f"preferred batch size {rows} reached"
    delay_expired = delay_ns > 0 and now_ns - oldest >= delay_ns
    if best and not delay_expired:
        return Cut(best, 0, best_reason)
    if stopped:
        return Cut(count, 0, stopped)
    if delay_expired:
        return Cut(count, 0, "max_queue_delay_microseconds expired")
    if rows >= max_preferred:
        return Cut(count, 0, f"batch size {rows} reached {max_preferred}")
    if delay_ns == 0:
        return Cut(count, 0, "queue empty (no max_queue_delay_microseconds)")
    return Cut(count, oldest + delay_ns, "")
