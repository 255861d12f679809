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
import traceback
from collections.abc import Sequence
from typing import Any, Callable, Dict, List, Optional, Tuple

import naiad_stub_loader as loader
import numpy as np
import triton_python_backend_utils as pb_utils

# pb_utils.TritonError codes -> naiad status names (as Triton maps them: UNKNOWN is gRPC
# UNKNOWN, HTTP 500). A TritonError made without a code is INTERNAL: tritonserver 2.51
# answers it with HTTP 500.
ERROR_STATUS = {
    pb_utils.TritonError.UNKNOWN: "UNKNOWN",
    pb_utils.TritonError.INTERNAL: "INTERNAL",
    pb_utils.TritonError.NOT_FOUND: "NOT_FOUND",
    pb_utils.TritonError.INVALID_ARG: "INVALID_ARG",
    pb_utils.TritonError.UNAVAILABLE: "UNAVAILABLE",
    pb_utils.TritonError.UNSUPPORTED: "UNSUPPORTED",
    pb_utils.TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    pb_utils.TritonError.CANCELLED: "CANCELLED",
}

# An exception raised by execute fails every request of the batch. tritonserver 2.51 answers
# 500 / INTERNAL; naiad answers 400 / INVALID_ARGUMENT because what a model raises on is most
# often the request it was given, and a 5xx invites retries that cannot succeed.
EXECUTE_FAILURE_STATUS = "INVALID_ARG"
# A model that breaks the execute contract (not a list, the wrong number of responses, not
# an InferenceResponse) is broken whatever the input: 500 / INTERNAL, as in Triton.
CONTRACT_FAILURE_STATUS = "INTERNAL"

_INSTANCE_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL", "KIND_AUTO": "CPU"}
_STUB_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep

_PbResponse = pb_utils.InferenceResponse
_PbTensor = pb_utils.Tensor
_wrap_request = pb_utils.InferenceRequest._wrap
_thread_state = pb_utils._current

#: One output: (name, V2 datatype, array).
Output = Tuple[str, str, np.ndarray]
#: One response: its outputs, its parameters (or None), and (status name, message) when the
#: model answered this request with an error.
Result = Tuple[List[Output], Optional[Dict[str, Any]], Optional[Tuple[str, str]]]
#: What ``execute`` gives each request of a decoupled model: its responses went out
#: through ``emit`` (see :class:`ModelRunner`).
NO_RESULT: Result = ([], None, None)
#: ``emit(request, result, final)``: one response of a decoupled model's request (result
#: None: the final flag alone), from whichever thread the model sends it on.
Emit = Callable[[Any, Optional[Result], bool], None]
#: What ``execute`` gives a request of an ordinary model that execute returned None for and
#: whose response was not sent yet: it leaves later, through ``emit`` (see :class:`_Late`).
#: Compared by identity.
DEFERRED: Result = ([], None, None)
#: A request the model rescheduled (until it runs again). Compared by identity.
RESCHEDULED: Result = ([], None, None)
_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class LoadFailure(Exception):
    """The model could not be imported or initialized (the message says why)."""


class BatchFailure(Exception):
    """``execute`` failed as a whole: every request of the batch gets this error."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _ContractError(Exception):
    """The model broke the execute contract (its message is Triton's, without a type)."""


def describe(exc: BaseException) -> str:
    """``Type: message`` and the model's frames, innermost first, as Triton shows errors
    raised in Python models (``At:`` lines of ``file(line): function``)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith(_STUB_FILES)]
    text = f"{type(exc).__name__}: {exc}"
    if frames:
        text += "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n"
                                      for f in reversed(frames))
    return text


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
        self._executes: _BackgroundExecutes | None = None
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
                    _finish(initialize(args))
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
        reschedules = pb_utils._reschedules
        results, pb_requests = self._execute_once(requests, reschedules)
        positions = range(len(requests))  # where the requests run last stand in results
        while pb_utils._reschedules != reschedules:  # the model rescheduled requests
            again = [index for index, pb_request in enumerate(pb_requests)
                     if getattr(pb_request, "_release", 1) == _RESCHEDULE]
            if not again:
                break
            # run them again on this instance, before its next batch (an iterative
            # sequence's next step), as a batch of their own
            reschedules = pb_utils._reschedules
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
                raise _ContractError(
                    "Number of InferenceResponse objects do not match the number of "
                    f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                    f"and InferenceResponse(s) size is:{len(returned)}\n")
            convert = self._convert
            results = []
            if pb_utils._reschedules != reschedules:
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
                results.append(convert(response, request, pb_request))
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
                raise _ContractError("Expected an 'InferenceResponse' object in the execute "
                                     "function return list, found type '<class "
                                     "'NoneType'>'.")
            return self._defer(request, pb_request, sender)

    def _defer(self, request: Any, pb_request: Any, sender: Any) -> None:
        """Execute returned None for ``request`` and nothing was sent: its response may be
        sent later, from any thread (Triton allows it)."""
        if not self.late_responses:
            raise _ContractError("Expected an 'InferenceResponse' object in the execute "
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
        failure = self._failure(exc)
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
        return [error if response is None else self._convert(response, request, pb_request)
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
                raise _ContractError(f"Python model '{self.instance_name}' is using the "
                                     f"decoupled mode and the execute function must return "
                                     f"None.")
        except Exception as exc:
            raise self._failure(exc) from None
        return [NO_RESULT] * len(requests)

    def _background(self) -> _BackgroundExecutes:
        if self._executes is None:
            self._executes = _BackgroundExecutes(self.instance_name)
        return self._executes

    def _emitter(self, request: Any, pb_request: Any
                 ) -> Callable[[Any, bool], None]:
        emit = self.emit
        convert = self._convert

        def send(response: Any, final: bool) -> None:
            if response is None:
                emit(request, None, final)
                return
            try:
                result = convert(response, request, pb_request)
            except _ContractError as exc:
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
                _finish(finalize(), self._loop)
            return None
        except Exception as exc:  # Triton logs a failing finalize and carries on
            return describe(exc)
        finally:
            if self._loop is not None:
                self._loop.close()
            loader.forget_model(self.module)

    # --- helpers ------------------------------------------------------------------------

    def _missing_execute(self, requests: list[Any]) -> Any:
        raise _ContractError(f"Python model {self.module.__file__} does not implement "
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
        raise _ContractError(f"Expected a list in the execute return, found type "
                             f"'{type(returned)}'.")

    def _convert(self, response: Any, request: Any, pb_request: Any) -> Result:
        if type(response) is not _PbResponse:
            if response is None:
                response = _sent_response(pb_request)
            elif not isinstance(response, _PbResponse):
                raise _ContractError("Expected an 'InferenceResponse' object in the execute "
                                     f"function return list, found type '{type(response)}'.")
        error = response._error
        if error is not None:
            return [], None, (ERROR_STATUS.get(error.code(), "INTERNAL"), error.message())
        requested = request.requested_outputs
        # Triton prunes what the request did not ask for (all of the config's outputs when
        # it names none); a config without outputs prunes nothing.
        wanted = self.output_names if requested is None else {o.name for o in requested}
        outputs = []
        for tensor in response._output_tensors:
            if type(tensor) is not _PbTensor:
                raise _ContractError("Expected a 'Tensor' object in the output_tensors of an "
                                     f"InferenceResponse, found type '{type(tensor)}'.")
            name = tensor._name
            if wanted and name not in wanted:
                continue
            array = tensor._array
            datatype = tensor._datatype
            if datatype == "BYTES":
                array = _bytes_array(array)
            outputs.append((name, datatype, array))
        parameters = response._parameters
        return outputs, (dict(parameters) if parameters else None), None

    def _failure(self, exc: Exception) -> BatchFailure:
        """The error every request of a failed batch gets (Triton's wording)."""
        status = EXECUTE_FAILURE_STATUS
        if isinstance(exc, (_ContractError, pb_utils._OutputTypeError)):
            detail = str(exc)
            status = CONTRACT_FAILURE_STATUS
        else:
            detail = describe(exc)
            if isinstance(exc, pb_utils.TritonError):
                status = ERROR_STATUS.get(exc.code(), status)
        return BatchFailure(status, f"Failed to process the request(s) for model "
                                    f"'{self.instance_name}', message: {detail}")


def _check_rescheduled(returned: list[Any], pb_requests: list[Any]) -> None:
    """Triton's rule: execute returns None for a request it rescheduled."""
    for response, pb_request in zip(returned, pb_requests):
        if response is not None and getattr(pb_request, "_release", 1) == _RESCHEDULE:
            raise _ContractError("Expected a None object in the execute function return list "
                                 "for reschduled request, found type "
                                 f"'{type(response)}'.")


def _sent_response(request: Any) -> Any:
    sender = request._sender
    if sender is None or sender._response is None:
        raise _ContractError("Expected an 'InferenceResponse' object in the execute function "
                             "return list, found type '<class 'NoneType'>'.")
    return sender._response


def _bytes_array(array: np.ndarray) -> np.ndarray:
    """A BYTES output as an object array of ``bytes`` (str items are UTF-8 encoded, other
    objects ``str()``-ed, as Triton serializes them). Returns ``array`` itself when it
    already is one."""
    if array.dtype == np.object_:
        for item in array.flat:
            if type(item) is not bytes:
                break
        else:
            return array
        out = np.empty(array.shape, dtype=object)
        out.flat[:] = [item if type(item) is bytes else
                       item.encode("utf-8") if isinstance(item, str) else
                       bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else
                       str(item).encode("utf-8")
                       for item in array.flat]
        return out
    return array.astype(object)  # np.bytes_ ("S") array: its items become bytes


class _BackgroundExecutes:
    """The event loop, on a thread of its own, that a decoupled model's ``async def
    execute`` coroutines run on, side by side (Triton's stub does the same)."""

    def __init__(self, instance_name: str) -> None:
        self.instance_name = instance_name
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name=f"naiad-async-execute-{instance_name}")
        self.thread.start()

    def run(self, coroutine: Any, model_dir: str) -> Any:
        """Run an ordinary model's ``async def execute`` there and wait for its result."""
        return asyncio.run_coroutine_threadsafe(_in_model(coroutine, model_dir),
                                                self.loop).result()

    def submit(self, coroutine: Any, pb_requests: list[Any]) -> None:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        future.add_done_callback(lambda done: self._done(done, pb_requests))

    def _done(self, done: Any, pb_requests: list[Any]) -> None:
        if done.cancelled():
            return
        exc = done.exception()
        if exc is None and done.result() is not None:
            exc = _ContractError(f"Python model '{self.instance_name}' is using the decoupled "
                                 f"mode and the execute function must return None.")
        if exc is None:
            return
        # Triton's words for a failed execute; the requests still open get the error
        message = (f"Failed to process the request(s) for model '{self.instance_name}', "
                   f"message: {describe(exc)}")
        pb_utils.Logger.log_error(message)
        for pb_request in pb_requests:
            sender = pb_request._sender
            if sender is not None and not sender._closed:
                try:
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except Exception:  # the model closed it meanwhile
                    pass

    def close(self, timeout: float = 30.0) -> None:
        """Let the running executes finish (up to ``timeout`` seconds), then stop."""
        pending = asyncio.run_coroutine_threadsafe(_drain(), self.loop)
        try:
            pending.result(timeout)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


async def _in_model(coroutine: Any, model_dir: str) -> Any:
    _thread_state.model_dir = model_dir  # for pb_utils.get_model_dir() on the loop's thread
    return await coroutine


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
            result = self.runner._convert(response, self.request, None)
        except _ContractError as exc:
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


async def _drain() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def _finish(result: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Await ``result`` if ``initialize``/``finalize`` was an ``async def``."""
    if not asyncio.iscoroutine(result):
        return result
    if loop is None or loop.is_closed():
        return asyncio.run(result)
    return loop.run_until_complete(result)
