"""The ensemble scheduler in process: steps chained by callbacks on their futures, whatever
order the config lists them in, from a thread or the loop, and a failing step that cancels
the steps still queued. The step models are real schedulers over real instance threads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.model_config_pb2 as mc
from google.protobuf import text_format
from loop_thread import loop_in_thread
from test_unit_ensemble_plan import ensemble, model, step, steps

from naiad.errors import InferenceServerError, Status, not_found
from naiad.futures import LoopWaiter
from naiad.metrics.stats import ModelStats
from naiad.models.gate import VersionGate
from naiad.scheduling.base import Scheduler, SchedulingContext
from naiad.scheduling.default import DefaultScheduler
from naiad.scheduling.dynamic import DynamicBatcher
from naiad.scheduling.ensemble import EnsembleScheduler
from naiad.scheduling.worker import InstanceWorker
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance, Tensor

WAIT_S = 10.0


class Elementwise(ModelInstance):
    """OUT = fn(IN) for each request; fails with ``error`` instead when given one; can be
    held at a gate."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray],
                 error: InferenceServerError | None = None) -> None:
        self.fn = fn
        self.error = error
        self.gate = threading.Event()
        self.gate.set()
        self.executions = 0

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        assert self.gate.wait(WAIT_S)
        self.executions += 1
        if self.error is not None:
            return [InferenceResponse(error=self.error) for _ in requests]
        out = []
        for request in requests:
            y = self.fn(request.inputs["IN"].data)
            out.append(InferenceResponse(outputs=[Tensor("OUT", "FP32", y.shape, y)]))
        return out


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    with loop_in_thread() as loop:
        yield loop


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S)


class Models:
    """Step models served by real schedulers, and the lookup an ensemble gets."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.served: dict[str, SimpleNamespace] = {}
        self.workers: list[InstanceWorker] = []

    def add(self, name: str, instance: ModelInstance, scheduling: str = "") -> None:
        text = f"""name: "{name}" backend: "python" max_batch_size: 0 {scheduling}
                   input [ {{ name: "IN", data_type: TYPE_FP32, dims: [ 4 ] }} ]
                   output [ {{ name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] }} ]"""
        config = text_format.Parse(text, mc.ModelConfig())
        worker = InstanceWorker(InstanceInfo(f"{name}_0", "KIND_CPU", 0, 0), name)
        asyncio.run_coroutine_threadsafe(worker.load(lambda: instance), self.loop).result()
        self.workers.append(worker)
        context = SchedulingContext(name, 1, config, [worker], ModelStats(name, 1))
        kind: type[Scheduler] = DynamicBatcher if scheduling else DefaultScheduler
        scheduler = on_loop(self.loop, lambda: kind(context))  # type: ignore[call-arg]
        self.served[name] = SimpleNamespace(name=name, version=1, scheduler=scheduler,
                                            signature=model(name, "IN:FP32", "OUT:FP32"),
                                            decoupled=False, gate=VersionGate())

    def lookup(self, name: str, version: str) -> SimpleNamespace:
        if name not in self.served:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return self.served[name]

    def ensemble(self, config: mc.ModelConfig) -> EnsembleScheduler:
        context = SchedulingContext(config.name, 1, config, [], ModelStats(config.name, 1),
                                    models=self.lookup)  # type: ignore[arg-type]
        return on_loop(self.loop, lambda: EnsembleScheduler(context))

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


@pytest.fixture
def models(loop) -> Iterator[Models]:
    models = Models(loop)
    try:
        yield models
    finally:
        models.stop()


def request_of(x: np.ndarray) -> InferenceRequest:
    request = InferenceRequest("ens", 1, {"X": Tensor("X", "FP32", x.shape, x)})
    request.arrival_ns = time.perf_counter_ns()
    return request


BACKWARDS = ensemble(
    "X:FP32", "Z:FP32",
    steps(step("last", {"IN": "y"}, {"OUT": "Z"}),
          step("middle", {"IN": "x"}, {"OUT": "y"}),
          step("first", {"IN": "X"}, {"OUT": "x"})))


def test_steps_listed_backwards_run_in_dependency_order_from_a_thread(models):
    models.add("first", Elementwise(lambda x: x + 1))
    models.add("middle", Elementwise(lambda x: x * 2))
    models.add("last", Elementwise(lambda x: x - 3))
    scheduler = models.ensemble(BACKWARDS)
    x = np.arange(4, dtype=np.float32)
    response = scheduler.submit(request_of(x)).result(WAIT_S)
    assert response.error is None
    np.testing.assert_array_equal(response.outputs[0].data, (x + 1) * 2 - 3)
    stats = scheduler.stats.as_dict()
    assert stats["inference_stats"]["success"]["count"] == 1


def test_many_requests_from_the_loop_each_get_their_own_answer(models, loop):
    models.add("first", Elementwise(lambda x: x + 1))
    models.add("middle", Elementwise(lambda x: x * 2))
    models.add("last", Elementwise(lambda x: x - 3))
    scheduler = models.ensemble(BACKWARDS)
    inputs = [np.full(4, n, np.float32) for n in range(50)]

    async def run() -> list[InferenceResponse]:
        waiter = LoopWaiter(asyncio.get_running_loop())
        return await asyncio.gather(*(waiter.wait(scheduler.submit(request_of(x)))
                                      for x in inputs))

    responses = asyncio.run_coroutine_threadsafe(run(), loop).result(WAIT_S)
    for x, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, (x + 1) * 2 - 3)
    asyncio.run_coroutine_threadsafe(scheduler.drain(), loop).result(WAIT_S)


def test_a_failing_step_answers_at_once_and_cancels_a_queued_one(models):
    # Two independent steps: "broken" fails; "held" waits in a dynamic batcher's queue
    # behind a request that holds its instance, and must be withdrawn, never run.
    held = Elementwise(lambda x: x)
    held.gate.clear()
    models.add("held", held, "dynamic_batching { }")
    broken = Elementwise(lambda x: x, InferenceServerError("broken on purpose",
                                                           Status.INTERNAL))
    broken_gate = broken.gate
    broken_gate.clear()
    models.add("broken", broken)
    config = ensemble(
        "X:FP32", "A:FP32 B:FP32",
        steps(step("held", {"IN": "X"}, {"OUT": "A"}),
              step("broken", {"IN": "X"}, {"OUT": "B"})))
    scheduler = models.ensemble(config)
    held_scheduler = models.served["held"].scheduler
    blocker = held_scheduler.submit(InferenceRequest(
        "held", 1, {"IN": Tensor("IN", "FP32", (4,), np.zeros(4, np.float32))}))
    answer = scheduler.submit(request_of(np.ones(4, np.float32)))
    deadline = time.monotonic() + WAIT_S
    while held_scheduler.pending() != 1:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    broken_gate.set()
    response = answer.result(WAIT_S)
    assert response.error is not None
    assert "ensemble 'ens' step 1 (model 'broken'): broken on purpose" in response.error.message
    assert held_scheduler.pending() == 0  # withdrawn
    held.gate.set()
    assert blocker.result(WAIT_S).error is None
    assert held.executions == 1  # only the blocker ran
    assert scheduler.stats.as_dict()["inference_stats"]["fail"]["count"] == 1


def test_a_step_whose_model_is_gone_fails_the_request_with_the_reason(models):
    models.add("first", Elementwise(lambda x: x + 1))
    models.add("middle", Elementwise(lambda x: x * 2))
    models.add("last", Elementwise(lambda x: x - 3))
    scheduler = models.ensemble(BACKWARDS)
    del models.served["middle"]  # unloaded since the ensemble loaded
    response = scheduler.submit(request_of(np.ones(4, np.float32))).result(WAIT_S)
    assert response.error is not None
    assert response.error.status is Status.NOT_FOUND
    assert "ensemble 'ens' step 1 (model 'middle')" in response.error.message
