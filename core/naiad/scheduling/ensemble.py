"""The ensemble scheduler (``platform: "ensemble"``): a pipeline of other models.

An ensemble runs no model code of its own. Each request walks the steps of its
:class:`~naiad.scheduling.ensemble_plan.EnsemblePlan`: a step starts as soon as every tensor
it reads exists, so independent steps run at the same time, and each step is an ordinary
request to the step's model, through that model's own scheduler (a composing model with
``dynamic_batching`` batches ensemble traffic with its direct traffic).

The step's model is looked up per request, so reloading a composing model is seen by the
next request; a step whose model is gone fails that request with the reason.

No thread or task waits for a step: each step's future calls back when it is done (on the
thread that finished it, usually the step model's instance thread), and that callback sends
the steps that were waiting for it.

An ensemble with a decoupled step streams: see :mod:`naiad.scheduling.ensemble_stream`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError, Future
from functools import partial

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.platforms import ENSEMBLE
from naiad.errors import InferenceServerError, unsupported
from naiad.futures import LightFuture
from naiad.hookspecs import hookimpl
from naiad.scheduling.base import (
    CalledModel,
    ModelLookup,
    Scheduler,
    SchedulerFactory,
    SchedulingContext,
)
from naiad.scheduling.default import batch_size_of
from naiad.scheduling.ensemble_plan import EnsemblePlan, EnsembleStep, build_plan, check_steps
from naiad.scheduling.ensemble_stream import StreamRun
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

DRAIN_POLL_S = 0.005


class EnsembleScheduler(Scheduler):
    """Runs each request through the ensemble's steps."""

    def __init__(self, context: SchedulingContext) -> None:
        if context.models is None:
            raise RuntimeError("an ensemble needs the server's models to call")
        self.name = context.name
        self.stats = context.stats
        self.lookup: ModelLookup = context.models
        self.batching = context.config.max_batch_size > 0
        self.plan: EnsemblePlan = build_plan(context.config)
        check_steps(self.plan, context.config,
                    lambda name, version: self.lookup(name, version).signature)
        # With a decoupled step the ensemble is decoupled (the model manager marked its
        # config, as Triton does): its requests stream (naiad.scheduling.ensemble_stream).
        self.streams = context.config.model_transaction_policy.decoupled
        # By step index (the config's order, not the plan's): the steps that read what a
        # step writes, and how many steps each one waits for.
        self.followers: list[list[EnsembleStep]] = [[] for _ in self.plan.steps]
        self.producer_counts = [0] * len(self.plan.steps)
        for step in self.plan.steps:
            self.producer_counts[step.index] = len(step.after)
            for producer in step.after:
                self.followers[producer].append(step)
        self._in_flight = 0
        self._count_lock = threading.Lock()

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        # Not cancellable, as Triton's ensembles: a request in progress runs to its end.
        answer: Future[InferenceResponse] = LightFuture(running=True)
        with self._count_lock:
            self._in_flight += 1
        if request.sender is not None:
            StreamRun(self, request, answer).start()
        elif self.streams:
            self._finished(request, answer, InferenceResponse(error=unsupported(
                f"ensemble '{self.name}' is decoupled (a step is): its responses stream; "
                f"send it through a stream (gRPC ModelStreamInfer, generate_stream)")))
        else:
            _Run(self, request, answer).start()
        return answer

    async def drain(self) -> None:
        # Steps finish on their models' instance threads: watch the count.
        while self._in_flight:
            await asyncio.sleep(DRAIN_POLL_S)

    def _step_request(self, step: EnsembleStep, request: InferenceRequest,
                     tensors: dict[str, Tensor]) -> tuple[CalledModel, InferenceRequest]:
        """The step's model and the request for it, checked against the model. The step
        has entered the model's gate (:mod:`naiad.models.gate`) and must leave it when it is
        over; a version that retired since the lookup is looked up again."""
        try:
            model = self.lookup(step.model_name, step.model_version)
            while not model.gate.enter():
                model = self.lookup(step.model_name, step.model_version)
        except InferenceServerError as exc:
            raise self._step_error(step, exc) from None
        inputs = {}
        for model_input, tensor_name in step.inputs:
            tensor = tensors[tensor_name]
            # A new Tensor per step: the step model's checks may reshape it in place.
            inputs[model_input] = Tensor(model_input, tensor.datatype, tensor.shape,
                                         tensor.data)
        step_request = InferenceRequest(
            model_name=model.name, model_version=model.version, inputs=inputs, id=request.id,
            requested_outputs=[RequestedOutput(output) for output, _ in step.outputs],
            parameters=request.parameters, arrival_ns=time.perf_counter_ns())
        try:
            model.signature.check(step_request)
        except InferenceServerError as exc:
            model.gate.leave()
            raise self._step_error(step, exc) from None
        if request.trace is not None:  # a traced request: each step is a child trace
            step_request.trace = request.trace.child(model, step_request)
        return model, step_request

    def _step_error(self, step: EnsembleStep, error: InferenceServerError
                   ) -> InferenceServerError:
        return InferenceServerError(f"ensemble '{self.name}' {step.describe()}: "
                                    f"{error.message}", error.status)

    def _finished(self, request: InferenceRequest, answer: Future[InferenceResponse],
                 response: InferenceResponse) -> None:
        """Record a request as Triton does (queue and compute times are its steps' sums),
        then answer it."""
        total = time.perf_counter_ns() - request.arrival_ns
        batch = batch_size_of(request, self.batching)
        queued, compute_input, infer, output = request.durations or (0, 0, 0, 0)
        ok = response.error is None
        if ok:
            self.stats.record_execution(batch, compute_input, infer, output)
        self.stats.record_request(ok, batch, total, queued, compute_input, infer, output)
        with self._count_lock:
            self._in_flight -= 1
        answer.set_result(response)


class _Run:
    """One request walking the steps: a step is sent as soon as the steps it reads from are
    done, from the callback of the last of them (on whichever thread finished it). The
    first failure answers the request and cancels the steps still queued."""

    def __init__(self, scheduler: EnsembleScheduler, request: InferenceRequest,
                 answer: Future[InferenceResponse]) -> None:
        self.scheduler = scheduler
        self.request = request
        self.answer = answer
        steps = scheduler.plan.steps
        # Everything below is guarded by the lock: steps finish on several threads.
        self.lock = threading.Lock()
        self.tensors: dict[str, Tensor] = dict(request.inputs)
        self.unfinished_producers = list(scheduler.producer_counts)  # by step index
        self.left = len(steps)
        self.running: dict[int, Future[InferenceResponse]] = {}
        self.over = False
        request.durations = (0, 0, 0, 0)

    def start(self) -> None:
        self._send([step for step in self.scheduler.plan.steps if not step.after])

    def _send(self, steps: list[EnsembleStep]) -> None:
        scheduler = self.scheduler
        for step in steps:
            try:
                with self.lock:
                    if self.over:
                        return
                    model, step_request = scheduler._step_request(step, self.request,
                                                                 self.tensors)
            except InferenceServerError as exc:
                self._fail(exc)
                return
            try:
                # Not under the lock: submitting may complete futures of this run (a
                # closing instance refuses a whole batch at once), whose callbacks take it.
                future = model.scheduler.submit(step_request)
            except InferenceServerError as exc:
                model.gate.leave()
                if step_request.trace is not None:
                    step_request.trace.abandon()
                self._fail(scheduler._step_error(step, exc))
                return
            future.add_done_callback(model.gate.leave)
            if step_request.trace is not None:  # first: the step's trace ends before it
                step_request.trace.watch(step_request, future)
            with self.lock:
                self.running[step.index] = future
            future.add_done_callback(partial(self._step_done, step, step_request))

    def _step_done(self, step: EnsembleStep, step_request: InferenceRequest,
                   future: Future[InferenceResponse]) -> None:
        try:
            response = future.result()
        except CancelledError:
            return  # this run failed and cancelled it
        if response.error is not None:
            self._fail(self.scheduler._step_error(step, response.error))
            return
        plan = self.scheduler.plan
        ready: list[EnsembleStep] = []
        missing: InferenceServerError | None = None
        outputs: list[Tensor] = []
        with self.lock:
            if self.over:
                return
            self.running.pop(step.index, None)
            if step_request.durations is not None and self.request.durations is not None:
                self.request.durations = tuple(  # type: ignore[assignment]
                    a + b for a, b in zip(self.request.durations, step_request.durations,
                                          strict=True))
            produced = {t.name: t for t in response.outputs}
            for model_output, tensor_name in step.outputs:
                tensor = produced.get(model_output)
                if tensor is None:
                    missing = InferenceServerError(
                        f"ensemble '{self.scheduler.name}' {step.describe()} did not "
                        f"produce its output '{model_output}'")
                    break
                self.tensors[tensor_name] = Tensor(tensor_name, tensor.datatype,
                                                   tensor.shape, tensor.data)
            self.left -= 1
            for follower in self.scheduler.followers[step.index]:
                self.unfinished_producers[follower.index] -= 1
                if not self.unfinished_producers[follower.index]:
                    ready.append(follower)
            done = missing is None and not self.left
            if done:
                self.over = True
                outputs = [self.tensors[name] for name in plan.output_producers]
        if missing is not None:
            self._fail(missing)
        elif done:
            self.scheduler._finished(self.request, self.answer,
                                    InferenceResponse(outputs=outputs))
        else:
            self._send(ready)

    def _fail(self, error: InferenceServerError) -> None:
        with self.lock:
            if self.over:
                return
            self.over = True
            running = list(self.running.values())
        for future in running:
            future.cancel()  # a step still queued is withdrawn; one running finishes unread
        self.scheduler._finished(self.request, self.answer, InferenceResponse(error=error))


@hookimpl(tryfirst=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    if config.platform == ENSEMBLE:
        return EnsembleScheduler
    return None
