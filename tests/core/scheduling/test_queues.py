"""naiad.scheduling.queues: the dynamic batcher's priority levels and queue policies
(Triton's ModelQueuePolicy), on their own, without a batcher or a model."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching

from naiad.errors import InferenceServerError, Status
from naiad.scheduling.queues import NS_PER_US, PriorityQueues, Waiting
from naiad.types import InferenceRequest

MS = 1000 * NS_PER_US


def batching(text: str = "") -> ModelDynamicBatching:
    return text_format.Parse(text, ModelDynamicBatching())


def waiting(name: str, withdrawn: list | None = None, **parameters: object) -> Waiting:
    request = InferenceRequest("m", -1, {}, id=name, parameters=dict(parameters))
    return Waiting(request, (withdrawn if withdrawn is not None else []).append, 0, 1, None)


def ids(items: list[Waiting]) -> list[str]:
    return [item.request.id for item in items]


def test_one_level_is_first_in_first_out_and_candidates_are_bounded():
    queues = PriorityQueues("m", batching())
    for name in "abc":
        queues.put(waiting(name), now_ns=0)
    assert queues.count == 3
    assert ids(queues.candidates(10)) == ["a", "b", "c"]
    assert ids(queues.candidates(2)) == ["a", "b"]


def test_a_higher_level_is_served_first_and_unknown_levels_take_the_default():
    queues = PriorityQueues("m", batching("priority_levels: 3 default_priority_level: 2"))
    queues.put(waiting("low", priority=3), 0)
    queues.put(waiting("default", priority=0), 0)
    queues.put(waiting("high", priority=1), 0)
    queues.put(waiting("unknown", priority=9), 0)
    queues.put(waiting("not-an-int", priority="1"), 0)
    assert ids(queues.candidates(10)) == ["high", "default", "unknown", "not-an-int", "low"]


def test_a_full_level_refuses_unavailable_naming_the_model_and_the_limit():
    queues = PriorityQueues("m", batching("default_queue_policy { max_queue_size: 2 }"))
    queues.put(waiting("a"), 0)
    queues.put(waiting("b"), 0)
    with pytest.raises(InferenceServerError) as caught:
        queues.put(waiting("c"), 0)
    assert caught.value.status is Status.UNAVAILABLE
    assert "model 'm'" in caught.value.message and "max_queue_size 2" in caught.value.message
    assert queues.count == 2


def test_removed_and_discarded_requests_leave_the_queue_once():
    queues = PriorityQueues("m", batching())
    items = [waiting(name) for name in "abc"]
    for item in items:
        queues.put(item, 0)
    queues.remove([items[0]])
    assert queues.discard(items[2]) is True
    assert queues.discard(items[2]) is False  # already gone
    assert ids(queues.candidates(10)) == ["b"] and queues.count == 1


def test_reject_answers_a_timed_out_request_and_delay_moves_it_last():
    reject = PriorityQueues("m", batching(
        "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 1000 }"))
    reject.put(waiting("old"), now_ns=0)
    reject.put(waiting("new"), now_ns=5 * MS)
    assert reject.expire(now_ns=0) == []  # nothing due yet
    assert ids(reject.expire(now_ns=1 * MS)) == ["old"]
    assert ids(reject.candidates(10)) == ["new"] and reject.count == 1

    delay = PriorityQueues("m", batching(
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 }"))
    delay.put(waiting("old"), now_ns=0)
    delay.put(waiting("new"), now_ns=5 * MS)
    assert delay.expire(now_ns=1 * MS) == []
    assert ids(delay.candidates(10)) == ["new", "old"] and delay.count == 2


def test_a_request_may_only_shorten_its_timeout_when_overrides_are_allowed():
    allowed = PriorityQueues("m", batching(
        "default_queue_policy { allow_timeout_override: true default_timeout_microseconds: "
        "5000 }"))
    shorter, longer = waiting("shorter", timeout=1000), waiting("longer", timeout=9000)
    allowed.put(shorter, now_ns=0)
    allowed.put(longer, now_ns=0)
    assert shorter.deadline_ns == 1 * MS and longer.deadline_ns == 5 * MS
    assert allowed.next_deadline == 1 * MS

    fixed = PriorityQueues("m", batching("default_queue_policy { default_timeout_microseconds: "
                                         "5000 }"))
    item = waiting("asks", timeout=1000)
    fixed.put(item, now_ns=0)
    assert item.deadline_ns == 5 * MS


def test_cancelling_a_queued_request_withdraws_it():
    withdrawn: list[Waiting] = []
    item = waiting("a", withdrawn)
    assert item.cancel() is True
    assert withdrawn == [item]
