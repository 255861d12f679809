"""Ensembles with decoupled steps, run as Triton runs them: each response of a decoupled
step flows on through the steps after it, and every time the ensemble's outputs are all
there, the client gets a response (a gRPC stream, ``generate_stream``, the OpenAI API).

Such an ensemble is decoupled itself (its configuration says so once its steps are loaded,
as Triton fills ``model_transaction_policy.decoupled``): the core gives its requests a
:class:`~naiad.types.ResponseSender`, and :class:`StreamRun` sends through it.

A run is a set of *branches*, each holding the tensors made so far. Ordinary steps add their
outputs to their branch; each response of a decoupled step starts a new branch (a copy of
the one it ran in, plus that response's tensors), in which the steps that read from it run.
A branch that holds every ensemble output sends them as one response. The stream ends
(final flag alone, as Triton) when no step runs any longer and every decoupled step sent its
final flag; the first failure ends it with that error and cancels the rest.

Cancelling the ensemble's request (a client that disconnects, a gRPC cancel) cancels every
step's request: queued ones are withdrawn, running decoupled models see
``request.is_cancelled()``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Protocol

from naiad.errors import InferenceServerError, Status
from naiad.scheduling.ensemble_plan import EnsembleStep
from naiad.types import Cancellation, InferenceRequest, InferenceResponse, ResponseSender, Tensor

if TYPE_CHECKING:
    from naiad.scheduling.base import CalledModel
    from naiad.scheduling.ensemble_plan import EnsemblePlan


class EnsembleScheduler(Protocol):
    """What a streaming run needs of :class:`naiad.scheduling.ensemble.EnsembleScheduler`,
    which starts it (a protocol: that module imports this one, not the other way round)."""

    name: str
    plan: EnsemblePlan
    producer_counts: list[int]
    followers: list[list[EnsembleStep]]

    def _step_request(self, step: EnsembleStep, request: InferenceRequest,
                      tensors: dict[str, Tensor]) -> tuple[CalledModel, InferenceRequest]: ...

    def _step_error(self, step: EnsembleStep, error: InferenceServerError
                    ) -> InferenceServerError: ...

    def _finished(self, request: InferenceRequest, answer: Future[InferenceResponse],
                  response: InferenceResponse) -> None: ...


class _Branch:
    """The tensors of one line of the run and the steps done in it."""

    __slots__ = ("done", "sent", "tensors", "waiting")

    def __init__(self, tensors: dict[str, Tensor], waiting: list[int]) -> None:
        self.tensors = tensors
        #: by step index: how many producers each step still waits for in this branch
        self.waiting = waiting
        self.done: set[int] = set()
        self.sent = False

    def fork(self) -> _Branch:
        branch = _Branch(dict(self.tensors), list(self.waiting))
        branch.done = set(self.done)
        return branch


class StreamRun:
    """One request to an ensemble with a decoupled step."""

    def __init__(self, scheduler: EnsembleScheduler, request: InferenceRequest,
                 answer: Future[InferenceResponse]) -> None:
        assert request.sender is not None
        self.scheduler = scheduler
        self.request = request
        self.sender: ResponseSender = request.sender
        self.answer = answer
        self.lock = threading.Lock()
        #: step submissions not over yet (a decoupled one: until its final flag)
        self.pending = 0
        self.over = False
        self.futures: set[Future[InferenceResponse]] = set()
        self.cancellations: list[Cancellation] = []
        request.durations = (0, 0, 0, 0)
        if request.cancellation is not None:
            request.cancellation.on_cancel(self.cancel)

    def start(self) -> None:
        plan = self.scheduler.plan
        root = _Branch(dict(self.request.inputs), list(self.scheduler.producer_counts))
        with self.lock:
            self.pending += 1  # the start itself: the run cannot end before it is over
        self._send(root, [step for step in plan.steps if not step.after])
        self._release()

    # --- sending steps ---------------------------------------------------------------

    def _send(self, branch: _Branch, steps: list[EnsembleStep]) -> None:
        for step in steps:
            try:
                with self.lock:
                    if self.over:
                        return
                    model, step_request = self.scheduler._step_request(step, self.request,
                                                                      branch.tensors)
                    cancellation = step_request.cancellation = Cancellation()
                    self.cancellations.append(cancellation)
                    self.pending += 1
            except InferenceServerError as exc:
                self._fail(exc)
                return
            if model.decoupled:
                self._send_decoupled(branch, step, model, step_request)
            else:
                self._send_ordinary(branch, step, model, step_request)

    def _send_ordinary(self, branch: _Branch, step: EnsembleStep, model: object,
                       step_request: InferenceRequest) -> None:
        try:
            future = model.scheduler.submit(step_request)  # type: ignore[attr-defined]
        except InferenceServerError as exc:
            model.gate.leave()  # type: ignore[attr-defined]
            self._fail(self.scheduler._step_error(step, exc))
            self._release()
            return
        future.add_done_callback(model.gate.leave)  # type: ignore[attr-defined]
        self._watch(future)

        def done(finished: Future[InferenceResponse]) -> None:
            try:
                response = finished.result()
            except CancelledError:
                response = InferenceResponse(error=InferenceServerError(
                    "the request was cancelled", Status.CANCELLED))
            except InferenceServerError as exc:
                response = InferenceResponse(error=exc)
            self._add_durations(step_request)
            self._step_response(branch, step, response, fork=False)
            self._release()

        future.add_done_callback(done)

    def _send_decoupled(self, branch: _Branch, step: EnsembleStep, model: object,
                        step_request: InferenceRequest) -> None:
        gate = model.gate  # type: ignore[attr-defined]

        def deliver(response: InferenceResponse | None, final: bool) -> None:
            if response is not None:
                self._step_response(branch, step, response, fork=True)
            if final:
                gate.leave()
                self._add_durations(step_request)
                self._release()

        sender = step_request.sender = ResponseSender(deliver)
        try:
            future = model.scheduler.submit(step_request)  # type: ignore[attr-defined]
        except InferenceServerError as exc:
            gate.leave()
            self._fail(self.scheduler._step_error(step, exc))
            self._release()
            return
        self._watch(future)

        def executed(finished: Future[InferenceResponse]) -> None:
            # The model's execute is over; its stream may go on. A failure (or a request
            # withdrawn before it ran) ends the step's stream unless the model ended it.
            error: InferenceServerError | None
            try:
                error = finished.result().error
            except CancelledError:
                error = InferenceServerError("the request was cancelled", Status.CANCELLED)
            except InferenceServerError as exc:
                error = exc
            if error is not None:
                sender.fail(error)

        future.add_done_callback(executed)

    def _watch(self, future: Future[InferenceResponse]) -> None:
        with self.lock:
            self.futures.add(future)
        future.add_done_callback(self.futures.discard)

    # --- responses --------------------------------------------------------------------

    def _step_response(self, branch: _Branch, step: EnsembleStep,
                       response: InferenceResponse, fork: bool) -> None:
        if response.error is not None:
            self._fail(self.scheduler._step_error(step, response.error))
            return
        produced = {tensor.name: tensor for tensor in response.outputs}
        ready: list[EnsembleStep] = []
        outputs: list[Tensor] | None = None
        with self.lock:
            if self.over:
                return
            if fork:
                branch = branch.fork()
            for model_output, tensor_name in step.outputs:
                tensor = produced.get(model_output)
                if tensor is None:
                    missing = InferenceServerError(
                        f"ensemble '{self.scheduler.name}' {step.describe()} did not produce "
                        f"its output '{model_output}'")
                    break
                branch.tensors[tensor_name] = Tensor(tensor_name, tensor.datatype,
                                                     tensor.shape, tensor.data)
            else:
                missing = None
                branch.done.add(step.index)
                for follower in self.scheduler.followers[step.index]:
                    branch.waiting[follower.index] -= 1
                    if not branch.waiting[follower.index]:
                        ready.append(follower)
                plan = self.scheduler.plan
                if not branch.sent and all(name in branch.tensors
                                           for name in plan.output_producers) \
                        and all(index in branch.done
                                for index in plan.output_producers.values()):
                    branch.sent = True
                    outputs = [branch.tensors[name] for name in plan.output_producers]
        if missing is not None:
            self._fail(missing)
            return
        if outputs is not None:
            try:
                self.sender.send(InferenceResponse(outputs=outputs))
            except RuntimeError:  # the stream ended meanwhile (a failure, a shutdown)
                return
        if ready:
            self._send(branch, ready)

    def _add_durations(self, step_request: InferenceRequest) -> None:
        with self.lock:
            if step_request.durations is not None and self.request.durations is not None:
                self.request.durations = tuple(  # type: ignore[assignment]
                    a + b for a, b in zip(self.request.durations, step_request.durations,
                                          strict=True))

    # --- the end ----------------------------------------------------------------------

    def _release(self) -> None:
        """One submission is over; the last one ends the stream."""
        with self.lock:
            self.pending -= 1
            last = self.pending == 0 and not self.over
            if last:
                self.over = True
        if last:
            if not self.sender.final:
                try:
                    self.sender.send(final=True)
                except RuntimeError:
                    pass
            self._finish(InferenceResponse())

    def _fail(self, error: InferenceServerError) -> None:
        with self.lock:
            if self.over:
                return
            self.over = True
        self._cancel_steps()
        self.sender.fail(error)
        self._finish(InferenceResponse(error=error))

    def cancel(self) -> None:
        """The client gave the request up: so do its steps."""
        self._cancel_steps()

    def _cancel_steps(self) -> None:
        with self.lock:
            cancellations = list(self.cancellations)
            futures = list(self.futures)
        for cancellation in cancellations:
            cancellation.cancel()
        for future in futures:
            future.cancel()  # a step still queued is withdrawn

    def _finish(self, response: InferenceResponse) -> None:
        self.request.arrival_ns = self.request.arrival_ns or time.perf_counter_ns()
        self.scheduler._finished(self.request, self.answer, response)
