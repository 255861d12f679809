"""Where to cut the next batch: Triton's dynamic batching rule as a pure function.

Kept apart from the batcher's queues and timers so the rule can be read, and tested, on
its own. Given the queued requests in dispatch order, :func:`cut_batch` answers "send the
first N now, and why" or "wait until T".

Why a batch was cut is one of a small fixed set of :class:`CutReason` values: the batcher
counts them per model version (``naiad_batch_cut_total{reason=...}`` on the metrics port)
and logs each cut at verbose level, so an operator sees why batches are the size they are.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from typing import NamedTuple, Protocol


class CutReason(enum.Enum):
    """Why a dynamic batch was sent: the value is the metric's ``reason`` label, the
    description what the verbose log says."""

    #: the batch reached a ``preferred_batch_size`` (or the largest one cannot be exceeded)
    PREFERRED_SIZE = ("preferred_size", "a preferred batch size was reached")
    #: the next request would not fit in ``max_batch_size``
    MAX_BATCH_SIZE = ("max_batch_size", "max_batch_size was reached")
    #: the next request's inputs have other shapes, so it cannot join
    SHAPES_DIFFER = ("shapes_differ", "the next request's input shapes differ")
    #: the oldest request waited out ``max_queue_delay_microseconds``
    DELAY_EXPIRED = ("delay_expired", "max_queue_delay_microseconds expired")
    #: no delay configured: everything queued went at once
    QUEUE_EMPTY = ("queue_empty", "everything queued went (no max_queue_delay_microseconds)")
    #: adaptive batching: no request arrived for twice the recent gap between arrivals
    ADAPTIVE_QUIET = ("adaptive_quiet", "adaptive batching: no request arrived for twice "
                                        "the recent gap between arrivals")
    #: adaptive batching: recent waits found no company, so this batch did not wait
    ADAPTIVE_BACKOFF = ("adaptive_backoff", "adaptive batching: recent waits found no "
                                            "company")

    def __init__(self, label: str, description: str) -> None:
        self.label = label
        self.description = description


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
    ``wait_until`` (perf_counter_ns) for more. ``reason`` says why a batch was cut (None
    while waiting)."""

    count: int
    wait_until: int
    reason: CutReason | None


def cut_batch(queued: Sequence[Queued], max_batch_size: int, preferred: Collection[int],
              max_preferred: int, delay_ns: int, now_ns: int) -> Cut:
    """Triton's rule. Walk the queue while the batch can grow: stop at ``max_batch_size``
    or at the first request whose shapes differ (send now). Remember the longest prefix
    that is a preferred size, or that stops short of overflowing the largest preferred
    size. Then: a preferred prefix goes at once unless the oldest request has waited out
    ``delay_ns`` (then everything goes); a batch that cannot grow goes at once; with no
    delay configured everything goes; otherwise wait for the delay to run out."""
    rows = count = best = 0
    stopped = best_reason = None
    # With no preferred sizes the largest "preferred" size is max_batch_size itself.
    full = CutReason.PREFERRED_SIZE if preferred else CutReason.MAX_BATCH_SIZE
    key = queued[0].shape_key
    oldest = queued[0].enqueue_ns
    for item in queued:
        if count:
            if best == 0 and rows + item.rows > max_preferred:
                best = count  # a full preferred batch without this request
                best_reason = full
            if rows + item.rows > max_batch_size:
                stopped = CutReason.MAX_BATCH_SIZE
                break
            if item.shape_key != key:
                stopped = CutReason.SHAPES_DIFFER
                break
        rows += item.rows
        count += 1
        oldest = min(oldest, item.enqueue_ns)
        if rows in preferred:
            best = count
            best_reason = CutReason.PREFERRED_SIZE
    delay_expired = delay_ns > 0 and now_ns - oldest >= delay_ns
    if best and not delay_expired:
        return Cut(best, 0, best_reason)
    if stopped:
        return Cut(count, 0, stopped)
    if delay_expired:
        return Cut(count, 0, CutReason.DELAY_EXPIRED)
    if rows >= max_preferred:
        return Cut(count, 0, full)
    if delay_ns == 0:
        return Cut(count, 0, CutReason.QUEUE_EMPTY)
    return Cut(count, oldest + delay_ns, None)
