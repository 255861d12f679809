"""The dynamic batcher's request queues: priority levels and their queue policies.

One FIFO per priority level (level 1 is served first), each with Triton's
``ModelQueuePolicy``: ``max_queue_size`` (a full queue refuses with UNAVAILABLE),
``default_timeout_microseconds`` (overridable per request when ``allow_timeout_override``,
but only downwards) and ``timeout_action``: REJECT answers a timed-out request with an
error, DELAY moves it behind the requests of its level that have not timed out.

Requests whose client went away are marked and skipped, not searched for and removed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching, ModelQueuePolicy

from naiad.errors import InferenceServerError, Status
from naiad.futures import Withdrawable
from naiad.types import InferenceRequest, InferenceResponse

NS_PER_US = 1000


class Waiting(Withdrawable[InferenceResponse]):
    """One queued request, what the batcher knows about it, and the future its client
    holds: the batcher completes it, and ``cancel()`` while it is queued calls
    ``withdraw(item)``."""

    __slots__ = (
        "deadline_ns",
        "enqueue_ns",
        "gone",
        "level",
        "request",
        "rows",
        "seq",
        "shape_key",
    )

    def __init__(self, request: InferenceRequest, withdraw: Callable[[Waiting], object],
                 enqueue_ns: int, rows: int, shape_key: object) -> None:
        super().__init__(withdraw)
        self.request = request
        self.enqueue_ns = enqueue_ns
        self.seq = 0  # arrival order, given under the batcher's lock
        self.rows = rows
        self.shape_key = shape_key
        self.level = 0
        self.deadline_ns = 0  # 0: no timeout
        # Set when the request left the queue (dispatched, dropped or timed out).
        self.gone = False


class _Level:
    __slots__ = ("count", "delayed", "policy", "queue", "reject")

    def __init__(self, policy: ModelQueuePolicy) -> None:
        self.policy = policy
        self.reject = policy.timeout_action == ModelQueuePolicy.REJECT
        self.queue: deque[Waiting] = deque()
        self.delayed: deque[Waiting] = deque()  # timed out under DELAY: served last
        self.count = 0

    def clean(self) -> None:
        for fifo in (self.queue, self.delayed):
            while fifo and fifo[0].gone:
                fifo.popleft()


class PriorityQueues:
    """The queued requests of one model version, in the order they may be batched."""

    def __init__(self, model_name: str, batching: ModelDynamicBatching) -> None:
        self.model_name = model_name
        count = max(batching.priority_levels, 1)
        default = batching.default_priority_level
        self.default_level = default if 1 <= default <= count else 1
        self.levels = [
            _Level(batching.priority_queue_policy.get(level, batching.default_queue_policy))
            for level in range(1, count + 1)
        ]
        self.leveled = batching.priority_levels > 0
        self.count = 0
        self.next_deadline = 0  # the earliest timeout of any queued request (0: none)

    def put(self, item: Waiting, now_ns: int) -> None:
        """Queue ``item`` at its priority level, or refuse when that level is full."""
        level = self.default_level
        if self.leveled:
            asked = item.request.parameters.get("priority")
            # As in Triton: 0, or a level the model does not have, means the default level.
            if type(asked) is int and 1 <= asked <= len(self.levels):
                level = asked
        queue = self.levels[level - 1]
        policy = queue.policy
        if policy.max_queue_size and queue.count >= policy.max_queue_size:
            raise InferenceServerError(
                f"Exceeds maximum queue size: model '{self.model_name}' already has "
                f"{queue.count} request(s) queued at priority level {level} "
                f"(max_queue_size {policy.max_queue_size})", Status.UNAVAILABLE)
        item.level = level
        timeout_us = policy.default_timeout_microseconds
        if policy.allow_timeout_override:
            asked = item.request.parameters.get("timeout")
            if type(asked) is int and asked > 0 and (timeout_us == 0 or asked < timeout_us):
                timeout_us = asked
        if timeout_us:
            item.deadline_ns = now_ns + timeout_us * NS_PER_US
            if not self.next_deadline or item.deadline_ns < self.next_deadline:
                self.next_deadline = item.deadline_ns
        queue.queue.append(item)
        queue.count += 1
        self.count += 1

    def candidates(self, limit: int) -> list[Waiting]:
        """Up to ``limit`` queued requests in dispatch order: by level, oldest first,
        a level's delayed requests after its others."""
        found: list[Waiting] = []
        for level in self.levels:
            if not level.count:
                continue
            for fifo in (level.queue, level.delayed):
                for item in fifo:
                    if item.gone:
                        continue
                    found.append(item)
                    if len(found) == limit:
                        return found
        return found

    def remove(self, items: Iterable[Waiting]) -> None:
        """Take dispatched requests out of the queues."""
        touched = set()
        for item in items:
            self._leave(item)
            touched.add(item.level)
        for level in touched:
            self.levels[level - 1].clean()

    def discard(self, item: Waiting) -> bool:
        """The client went away: drop ``item`` if it is still queued (then True)."""
        if item.gone:
            return False
        self._leave(item)
        self.levels[item.level - 1].clean()
        return True

    def expire(self, now_ns: int) -> list[Waiting]:
        """Apply the timeout actions due at ``now_ns``; return the requests to reject."""
        if not self.next_deadline or now_ns < self.next_deadline:
            return []
        rejected: list[Waiting] = []
        next_deadline = 0
        for level in self.levels:
            keep: deque[Waiting] = deque()
            for item in level.queue:
                if item.gone:
                    continue
                if item.deadline_ns and item.deadline_ns <= now_ns:
                    item.deadline_ns = 0
                    if level.reject:
                        self._leave(item)
                        rejected.append(item)
                    else:
                        level.delayed.append(item)
                    continue
                if item.deadline_ns and (not next_deadline or item.deadline_ns < next_deadline):
                    next_deadline = item.deadline_ns
                keep.append(item)
            level.queue = keep
            level.clean()
        self.next_deadline = next_deadline
        return rejected

    def _leave(self, item: Waiting) -> None:
        item.gone = True
        self.levels[item.level - 1].count -= 1
        self.count -= 1
