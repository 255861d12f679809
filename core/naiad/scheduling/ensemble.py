"""The ensemble scheduler (``platform: "ensemble"``): a pipeline of other models.

An ensemble runs no model code of its own. Each request walks the steps of its
:class:`~naiad.scheduling.ensemble_plan.EnsemblePlan`: a step starts as soon as every tensor
it reads exists, so independent steps run at the same time, and each step is an ordinary
request to the step's model, through that model's own scheduler (a composing model with
``dynamic_batching`` batches ensemble traffic with its direct traffic).

The step's model is looked up per request, so reloading a composing model is seen by the
next request; a step whose model is gone fails that request with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.platforms import ENSEMBLE
from naiad.errors import InferenceServerError
from naiad.hookspecs import hookimpl
from naiad.scheduling.base import ModelLookup, Scheduler, SchedulerFactory, SchedulingContext
from naiad.scheduling.default import batch_size_of
from naiad.scheduling.ensemble_plan import EnsemblePlan, EnsembleStep, build_plan, check_steps
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


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
        # A chain (every step reads only what the one before wrote) needs no tasks.
        self._chain = all(step.after == (previous.index,)
                          for previous, step in itertools.pairwise(self.plan.steps))
        self._in_flight = 0
        self._drained: asyncio.Event | None = None

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self._in_flight += 1
        tensors: dict[str, Tensor] = dict(request.inputs)
        request.durations = (0, 0, 0, 0)
        try:
            if self._chain:
                for step in self.plan.steps:
                    await self._run_step(step, request, tensors)
            else:
                await self._run_graph(request, tensors)
        except InferenceServerError as exc:
            self._record(request, ok=False)
            return InferenceResponse(error=exc)
        finally:
            self._in_flight -= 1
            if not self._in_flight and self._drained is not None:
                self._drained.set()
        self._record(request, ok=True)
        outputs = [tensors[name] for name in self.plan.output_producers]
        return InferenceResponse(outputs=outputs)

    async def _run_graph(self, request: InferenceRequest, tensors: dict[str, Tensor]) -> None:
        """Start every step once the steps it waits for are done; the first failure
        cancels the rest."""
        tasks: dict[int, asyncio.Task[None]] = {}
        for step in self.plan.steps:  # producers come first: their tasks already exist
            waits = [tasks[i] for i in step.after]
            tasks[step.index] = asyncio.ensure_future(
                self._run_after(waits, step, request, tensors))
        try:
            await asyncio.gather(*tasks.values())
        finally:
            for task in tasks.values():
                task.cancel()

    async def _run_after(self, waits: list[asyncio.Task[None]], step: EnsembleStep,
                         request: InferenceRequest, tensors: dict[str, Tensor]) -> None:
        for wait in waits:
            await asyncio.shield(wait)
        await self._run_step(step, request, tensors)

    async def _run_step(self, step: EnsembleStep, request: InferenceRequest,
                        tensors: dict[str, Tensor]) -> None:
        """Send one step's request to its model and add what it produced to ``tensors``."""
        try:
            model = self.lookup(step.model_name, step.model_version)
        except InferenceServerError as exc:
            raise InferenceServerError(f"ensemble '{self.name}' {step.describe()}: "
                                       f"{exc.message}", exc.status) from None
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
            response = await model.scheduler.infer(step_request)
        except InferenceServerError as exc:
            raise self._step_error(step, exc) from None
        if response.error is not None:
            raise self._step_error(step, response.error)
        if step_request.durations is not None and request.durations is not None:
            request.durations = tuple(  # type: ignore[assignment]
                a + b for a, b in zip(request.durations, step_request.durations, strict=True))
        produced = {t.name: t for t in response.outputs}
        for model_output, tensor_name in step.outputs:
            tensor = produced.get(model_output)
            if tensor is None:
                raise InferenceServerError(
                    f"ensemble '{self.name}' {step.describe()} did not produce its output "
                    f"'{model_output}'")
            tensors[tensor_name] = Tensor(tensor_name, tensor.datatype, tensor.shape,
                                          tensor.data)

    def _step_error(self, step: EnsembleStep, error: InferenceServerError
                    ) -> InferenceServerError:
        return InferenceServerError(f"ensemble '{self.name}' {step.describe()}: "
                                    f"{error.message}", error.status)

    def _record(self, request: InferenceRequest, ok: bool) -> None:
        """As Triton does: an ensemble's queue and compute times are its steps' sums."""
        total = time.perf_counter_ns() - request.arrival_ns
        batch = batch_size_of(request, self.batching)
        queued, compute_input, infer, output = request.durations or (0, 0, 0, 0)
        if ok:
            self.stats.record_execution(batch, compute_input, infer, output)
        self.stats.record_request(ok, batch, total, queued, compute_input, infer, output)

    async def drain(self) -> None:
        while self._in_flight:
            self._drained = asyncio.Event()
            await self._drained.wait()


@hookimpl(tryfirst=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    if config.platform == ENSEMBLE:
        return EnsembleScheduler
    return None
