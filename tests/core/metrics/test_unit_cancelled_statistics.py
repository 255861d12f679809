"""A request its client cancelled before it ran counts as a failure for reason CANCELED and
in no execution, whichever scheduler held it (the dynamic batcher's withdrawal:
test_unit_dynamic_batcher.py): here, the default scheduler whose instance refused it
CANCELLED, as a Python model's worker process does for a request cancelled while it
waited there."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad.metrics.stats import ModelStats
from naiad.scheduling.base import SchedulingContext
from naiad.scheduling.default import DefaultScheduler
from naiad.scheduling.worker import InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance, Tensor


class RefusingInstance(ModelInstance):
    """Answers CANCELLED for a request whose input holds a negative number, else echoes."""

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        responses = []
        for request in requests:
            data = request.inputs["X"].data
            if (data < 0).any():
                error = InferenceServerError("model 'm': the request was cancelled before it "
                                             "ran", Status.CANCELLED)
                responses.append(InferenceResponse(error=error))
            else:
                responses.append(InferenceResponse(outputs=[Tensor("Y", "FP32", data.shape,
                                                                   data)]))
        return responses


def request(value: float) -> InferenceRequest:
    data = np.full((1,), value, np.float32)
    return InferenceRequest("m", 1, {"X": Tensor("X", "FP32", data.shape, data)})


async def test_a_request_refused_as_cancelled_is_a_canceled_failure_and_no_execution():
    worker = InstanceWorker(InstanceInfo("m_0", "KIND_CPU", 0, 0), "m")
    await worker.load(RefusingInstance)
    stats = ModelStats("m", 1)
    scheduler = DefaultScheduler(SchedulingContext("m", 1, ModelConfig(), [worker], stats))
    try:
        answers = [await asyncio.wrap_future(scheduler.submit(request(v)))
                   for v in (1.0, -1.0, 2.0)]
    finally:
        worker.stop()
    assert [a.error is None for a in answers] == [True, False, True]
    assert (stats.success.count, stats.fail.count, stats.execution_count) == (2, 1, 2)
    assert stats.failures == {"CANCELED": 1}
    assert stats.inference_count == 2
