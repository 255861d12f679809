"""Running one ``TritonPythonModel``: import, ``initialize``, ``execute``, ``finalize`` and
``auto_complete_config``, with Triton's checks and Triton's error texts.

Both execution modes run models through this module, so a model behaves the same in a worker
process and in-process: the worker encodes the results as messages, the in-process instance
turns them into naiad's types. It needs only the standard library and numpy (it runs in any
Python 3.9 or newer a model's environment brings), and it knows nothing of naiad's types:
requests are objects with ``id``, ``inputs`` (name -> an object with ``name``, ``datatype``
and ``data``), ``parameters``, ``requested_outputs`` (None, or objects with a ``name``) and
``cancellation`` (None, or an object whose ``cancelled`` turns true when the client gives
up). A decoupled model's responses leave through the ``emit`` function the mode gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Callable

import naiad_stub_loader as loader
import naiad_stub_requests as _requests
import triton_python_backend_utils as pb_utils
from naiad_stub_coroutines import BackgroundExecutes, finish
from naiad_stub_results import (
    DEFERRED,
    NO_RESULT,
    RESCHEDULED,
    BatchFailure,
    ContractError,
    Emit,
    Result,
    _check_rescheduled,
    batch_failure,
    describe,
    result_of,
)

# What the execution modes use: the runner, and the results and failures it gives
# (naiad_stub_results) that they turn into messages or naiad's responses.
__all__ = ["DEFERRED", "BatchFailure", "LoadFailure", "ModelRunner", "Result", "auto_complete",
           "describe", "initialize_args"]

_INSTANCE_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL", "KIND_AUTO": "CPU"}

_wrap_request = pb_utils.InferenceRequest._wrap
_thread_state = pb_utils._current
_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class LoadFailure(Exception):
    """The model could not be imported or initialized (the message says why)."""


def initialize_args(config_json: str, instance_kind: str, instance_name: str,
                    device_id: int, model_dir: str, version: int, model_name: str
                    ) -> dict[str, str]:
    """The ``args`` Triton passes to ``initialize``: every value a str."""
    return {
        "model_config": config_json,
        "model_instance_kind": _INSTANCE_KINDS.get(instance_kind, instance_kind),
        "model_instance_name": instance_name,
        "model_instance_device_id": str(device_id),
        "model_repository": model_dir,
        "model_version": str(version),
        "model_name": model_name,
    }


def auto_complete(model_file: str, config_json: str, model_name: str) -> dict[str, Any]:
    """What ``TritonPythonModel.auto_complete_config`` (a static method, if the model has
    one) makes of the config (a JSON string); the config itself when there is none. Raises
    :class:`LoadFailure` with Triton's message when it returns something else; the model's
    own exceptions propagate."""
    pb_utils._set_model_dir(os.path.dirname(model_file))
    module = loader.import_model(model_file)
    try:
        model_class = getattr(module, "TritonPythonModel", None)
        if model_class is None or not hasattr(model_class, "auto_complete_config"):
            return json.loads(config_json)
        result = model_class.auto_complete_config(pb_utils.ModelConfig(config_json))
        if not isinstance(result, pb_utils.ModelConfig):
            raise LoadFailure(f"auto_complete_config function in model '{model_name}' must "
                              f"return a valid pb.ModelConfig object.")
        return result.as_dict()
    finally:
        loader.forget_model(module)


class ModelRunner:
    """One ``TritonPythonModel`` object, imported and initialized."""

    def __init__(self, model_file: str, args: dict[str, str], output_names: Sequence[str],
                 whole_process: bool = False, emit: Emit | None = None,
                 late_responses: bool = False) -> None:
        """Import ``model_file`` and run ``initialize(args)``. Raises :class:`LoadFailure`.
        ``whole_process``: this process serves only this model (a worker). ``emit``: how
        a decoupled model's responses leave (the execution mode's); requests of a
        decoupled model get response senders that call it. ``late_responses``: ``emit``
        can also carry an ordinary model's response after execute returned None for its
        request (the worker's can: :data:`DEFERRED`); else such a request fails the
        batch."""
        name = args["model_name"]
        config = json.loads(args["model_config"])
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled"))
        if self.decoupled and emit is None:
            raise LoadFailure(f"model '{name}' is decoupled, and this execution mode cannot "
                              f"send its responses")
        self.emit = emit
        self.late_responses = late_responses and emit is not None
        # The deferred requests of the batch just executed, until :meth:`arm_late`.
        self._late: list[_Late] = []
        self.model_name = name
        self.instance_name = args["model_instance_name"]
        self.model_file = model_file
        # the model's version folder (pb_utils.get_model_dir()): from its args, since a
        # Python-based backend's model.py lives in the backend directory
        self.version_dir = os.path.join(args["model_repository"], args["model_version"]) \
            if args.get("model_repository") and args.get("model_version") \
            else os.path.dirname(model_file)
        # What a request that names no outputs gets, as Triton: every output of the config.
        self.output_names = frozenset(output_names)
        self._loop: asyncio.AbstractEventLoop | None = None
        # a decoupled model's coroutine executes, run on a loop thread of their own
        self._executes: BackgroundExecutes | None = None
        self._closed = False
        self._whole_process = whole_process
        pb_utils._set_model_dir(self.version_dir, whole_process)
        if whole_process:
            # Triton's stub embeds Python with sys.argv == [""]; models that call
            # unittest.main() (Triton's QA models do) read it, and the worker's own
            # command line would be taken for test names
            sys.argv[:] = [""]
        try:
            module = loader.import_model(model_file)
        except Exception as exc:
            raise LoadFailure(f"model '{name}': failed to import '{model_file}': "
                              f"{describe(exc)}") from exc
        self.module = module
        try:
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None:
                raise LoadFailure(f"model '{name}': '{model_file}' does not define a class named "
                                  "TritonPythonModel")
            try:
                model = model_class()
                initialize = getattr(model, "initialize", None)
                if initialize is not None:
                    finish(initialize(args))
            except Exception as exc:
                raise LoadFailure(f"model '{name}' failed to initialize: {describe(exc)}") from exc
        except BaseException:
            loader.forget_model(module)
            raise
        self.model = model
        self._execute = getattr(model, "execute", None) or self._missing_execute
        pb_utils._allow_model_calls()

    def execute(self, requests: Sequence[Any]) -> list[Result]:
        """Run ``execute`` on a batch; one result per request. Raises
        :class:`BatchFailure` when the batch failed as a whole. A request whose client
        gave up before it ran (``request.cancellation``) is answered CANCELLED without
        reaching the model."""
        reschedules = _requests._reschedules
        results, pb_requests = self._execute_once(requests, reschedules)
        positions = range(len(requests))  # where the requests run last stand in results
        while _requests._reschedules != reschedules:  # the model rescheduled requests
            again = [index for index, pb_request in enumerate(pb_requests)
                     if getattr(pb_request, "_release", 1) == _RESCHEDULE]
            if not again:
                break
            # run them again on this instance, before its next batch (an iterative
            # sequence's next step), as a batch of their own
            reschedules = _requests._reschedules
            requests = [requests[index] for index in again]
            positions = [positions[index] for index in again]
            rerun, pb_requests = self._execute_once(requests, reschedules)
            for position, result in zip(positions, rerun):
                results[position] = result
        return results

    def _execute_once(self, requests: Sequence[Any], reschedules: int
                      ) -> tuple[list[Result], list[Any]]:
        for request in requests:
            cancellation = request.cancellation
            if cancellation is not None and cancellation.cancelled:
                return self._without_cancelled(requests), []
        _thread_state.model_dir = self.version_dir  # for pb_utils.get_model_dir()
        wrap = _wrap_request
        output_names = self.output_names
        pb_requests = [wrap(request, output_names) for request in requests]
        if self.decoupled:
            return self._execute_decoupled(requests, pb_requests), pb_requests
        return self._execute_ordinary(requests, pb_requests, reschedules), pb_requests

    def _execute_ordinary(self, requests: Sequence[Any], pb_requests: list[Any],
                          reschedules: int) -> list[Result]:
        try:
            returned = self._execute(pb_requests)
            if type(returned) is not list:
                returned = self._unusual_return(returned, len(requests))
            if len(returned) != len(requests):
                raise ContractError(
                    "Number of InferenceResponse objects do not match the number of "
                    f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                    f"and InferenceResponse(s) size is:{len(returned)}\n")
            convert = result_of
            output_names = self.output_names
            results = []
            if _requests._reschedules != reschedules:
                _check_rescheduled(returned, pb_requests)
            for response, request, pb_request in zip(returned, requests, pb_requests):
                if response is None or pb_request._sender is not None:
                    if response is None and getattr(pb_request, "_release", 1) == _RESCHEDULE:
                        results.append(RESCHEDULED)  # it runs again: execute() fills it in
                        continue
                    # the model used the response sender, or answers this request later
                    response = self._claim(response, request, pb_request)
                    if response is None:
                        results.append(DEFERRED)
                        continue
                results.append(convert(response, request, pb_request, output_names))
            return results
        except Exception as exc:
            return self._failed(exc, requests, pb_requests)

    def arm_late(self) -> None:
        """The batch's result went out: the deferred requests' responses may follow it
        (those sent meanwhile leave now)."""
        late, self._late = self._late, []
        for one in late:
            one.arm()

    def _claim(self, response: Any, request: Any, pb_request: Any) -> Any:
        """An ordinary model's response to ``request``: the one execute returned, else the
        one its response sender sent during execute; None when it comes later (the request
        is deferred). Raises Triton's error for a second response."""
        sender = pb_request._sender
        if sender is None:
            return self._defer(request, pb_request, None)
        with sender._lock:
            if response is not None:
                if sender._sent:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response.")
                sender._sent = sender._closed = True
                return response
            if sender._response is not None:
                return sender._response
            if sender._closed:  # cannot happen: a final flag needs a response first
                raise ContractError("Expected an 'InferenceResponse' object in the execute "
                                     "function return list, found type '<class "
                                     "'NoneType'>'.")
            return self._defer(request, pb_request, sender)

    def _defer(self, request: Any, pb_request: Any, sender: Any) -> None:
        """Execute returned None for ``request`` and nothing was sent: its response may be
        sent later, from any thread (Triton allows it)."""
        if not self.late_responses:
            raise ContractError("Expected an 'InferenceResponse' object in the execute "
                                 "function return list, found type '<class 'NoneType'>' (an "
                                 "in-process model cannot send a request's response after "
                                 "execute returned; EXECUTION_MODE isolated can)")
        late = _Late(self, request)
        pb_request._late = late
        if sender is not None:
            sender._late = late
        self._late.append(late)
        return None

    def _failed(self, exc: Exception, requests: Sequence[Any], pb_requests: list[Any]
                ) -> list[Result]:
        """Execute failed: as in Triton, every sender closes, a request whose response was
        sent already keeps it, the others get the error. Raises :class:`BatchFailure` when
        no response was sent (the usual case: the batch fails as a whole)."""
        failure = batch_failure(exc, self.instance_name)
        for late in self._late:
            late.done = True  # their requests get the error
        self._late = []
        sent = []
        for pb_request in pb_requests:
            sender = pb_request._sender
            if sender is not None:
                sender._closed = True
                sent.append(sender._response)
            else:
                sent.append(None)
        if not any(response is not None for response in sent):
            raise failure
        pb_utils.Logger.log_error(failure.message)
        error: Result = ([], None, (failure.status, failure.message))
        return [error if response is None
                else result_of(response, request, pb_request, self.output_names)
                for response, request, pb_request in zip(sent, requests, pb_requests)]

    def _without_cancelled(self, requests: Sequence[Any]) -> list[Result]:
        cancelled = [r.cancellation is not None and r.cancellation.cancelled for r in requests]
        running = [r for r, gone in zip(requests, cancelled) if not gone]
        results = iter(self.execute(running) if running else [])
        refused: Result = ([], None, ("CANCELLED", f"model '{self.model_name}': the request "
                                                   f"was cancelled before it ran"))
        return [refused if gone else next(results) for gone in cancelled]

    def _execute_decoupled(self, requests: Sequence[Any], pb_requests: list[Any]
                           ) -> list[Result]:
        """``execute`` of a decoupled model: each request's responses leave through its
        sender as the model sends them; execute itself must return None."""
        for request, pb_request in zip(requests, pb_requests):
            pb_request._sender = pb_utils.InferenceResponseSender(
                self._emitter(request, pb_request), pb_request.is_cancelled)
        try:
            returned = self._execute(pb_requests)
            if asyncio.iscoroutine(returned):
                # As Triton (2.44+): a decoupled model's ``async def execute`` runs in the
                # background, concurrently with the next batches; its responses leave
                # through the senders, and what it raises is logged
                self._background().submit(returned, pb_requests)
                return [NO_RESULT] * len(requests)
            if returned is not None:
                raise ContractError(f"Python model '{self.instance_name}' is using the "
                                     f"decoupled mode and the execute function must return "
                                     f"None.")
        except Exception as exc:
            raise batch_failure(exc, self.instance_name) from None
        return [NO_RESULT] * len(requests)

    def _background(self) -> BackgroundExecutes:
        if self._executes is None:
            self._executes = BackgroundExecutes(self.instance_name)
        return self._executes

    def _emitter(self, request: Any, pb_request: Any
                 ) -> Callable[[Any, bool], None]:
        emit = self.emit
        output_names = self.output_names

        def send(response: Any, final: bool) -> None:
            if response is None:
                emit(request, None, final)
                return
            try:
                result = result_of(response, request, pb_request, output_names)
            except ContractError as exc:
                raise pb_utils.TritonModelException(str(exc)) from None
            emit(request, result, final)

        return send

    def finalize(self) -> str | None:
        """Run ``finalize``; the error it raised, described, or None."""
        if self._closed:
            return None
        self._closed = True
        pb_utils._set_model_dir(self.version_dir)
        finalize = getattr(self.model, "finalize", None)
        if self._executes is not None:
            self._executes.close()
        if self._whole_process:  # a worker serves this model alone: BLS ends with execute
            pb_utils._forbid_model_calls()
        try:
            if finalize is not None:
                finish(finalize(), self._loop)
            return None
        except Exception as exc:  # Triton logs a failing finalize and carries on
            return describe(exc)
        finally:
            if self._loop is not None:
                self._loop.close()
            loader.forget_model(self.module)

    # --- helpers ------------------------------------------------------------------------

    def _missing_execute(self, requests: list[Any]) -> Any:
        raise ContractError(f"Python model {self.module.__file__} does not implement "
                             f"`execute` method.")

    def _unusual_return(self, returned: Any, count: int) -> list[Any]:
        """What ``execute`` returned when it is not a list: a coroutine (``async def
        execute``, run to completion on this instance's own event loop) or None (the
        responses went through response senders)."""
        if asyncio.iscoroutine(returned):
            # On the instance's background loop, as Triton's stub runs it: tasks the
            # coroutine starts go on running after it returned (a late response)
            returned = self._background().run(returned, self.version_dir)
            if type(returned) is list:
                return returned
        if returned is None:
            return [None] * count
        raise ContractError(f"Expected a list in the execute return, found type "
                             f"'{type(returned)}'.")


class _Late:
    """The response of an ordinary model's request that execute returned None for: sent
    later through the response sender, from any thread (Triton allows it), it leaves through
    the runner's ``emit``, final, once the batch's result went out (:meth:`arm`). A request
    the model lets go of without a response gets an error, instead of waiting forever."""

    __slots__ = ("armed", "done", "held", "lock", "request", "runner")

    def __init__(self, runner: ModelRunner, request: Any) -> None:
        self.runner = runner
        self.request = request
        self.lock = threading.Lock()
        self.armed = False
        self.done = False
        self.held: Result | None = None

    def send(self, response: Any) -> None:
        try:
            result = result_of(response, self.request, None, self.runner.output_names)
        except ContractError as exc:
            raise pb_utils.TritonModelException(str(exc)) from None
        with self.lock:
            self.done = True
            if not self.armed:
                self.held = result
                return
        self._emit(result)

    def arm(self) -> None:
        with self.lock:
            self.armed = True
            held, self.held = self.held, None
        if held is not None:
            self._emit(held)

    def _emit(self, result: Result) -> None:
        emit = self.runner.emit
        if emit is not None:
            emit(self.request, result, True)

    def __del__(self) -> None:
        if self.done or not self.armed:
            return
        self.done = True
        runner = self.runner
        try:
            self._emit(([], None, ("INTERNAL", (
                f"model '{runner.model_name}': execute returned None for request "
                f"'{getattr(self.request, 'id', '')}' and the model let go of it without "
                f"sending its response"))))
        except Exception:  # the worker is ending
            pass
