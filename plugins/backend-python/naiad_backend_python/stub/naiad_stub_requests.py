"""``pb_utils.InferenceRequest``, ``InferenceResponse`` and ``InferenceResponseSender``,
Triton's request flags and constants, and a BLS call's request and response in plain values
(:func:`_describe_call`, :func:`_call_response`) for either execution mode. Re-exported by
``triton_python_backend_utils``.

The requests ``execute`` receives are views of the server's requests (``_wrap``): nothing is
copied, and what needs work is computed when the model asks for it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from naiad_stub_errors import ErrorCode as _ErrorCode
from naiad_stub_errors import TritonError, TritonModelException
from naiad_stub_model_calls import ResponseIterator, _model_calls, _OneResponse, _resolve
from naiad_stub_tensor import Tensor, _input_tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
# How many times a model asked for a request to be rescheduled (set_release_flags): the
# runner looks at its requests' flags only when this changed during execute.
_reschedules = 0

# Request parameters Triton consumes itself and never shows the model.
_RESERVED_PARAMETERS = frozenset({
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
    "binary_data_output",
})


class PreferredMemory:
    """Where BLS outputs should live (accepted for compatibility; naiad keeps CPU memory)."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


TRITONSERVER_MEMORY_GPU = 0
TRITONSERVER_MEMORY_CPU = 1


class _InferenceTrace:
    """A request's trace (``request.trace()``), to pass to the BLS requests made for it
    (``InferenceRequest(..., trace=request.trace())``): the server then traces them as its
    children. ``_handle``: the server's trace (in process) or its id (in a worker); None when
    the request is not traced."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any = None) -> None:
        self._handle = handle

    def get_context(self) -> str | None:
        """Triton's OpenTelemetry context of the request; naiad has none to give."""
        return None


class InferenceRequest:
    """One request in the list ``execute`` receives.

    The server makes these from its own requests without copying tensors; values that
    need work (``parameters()``, ``correlation_id()``...) are computed when asked for.
    Constructing one in a model (for BLS) works, but ``exec`` is not supported yet.
    """

    __slots__ = (
        "_correlation_id",
        "_flags",
        "_inputs",
        "_late",
        "_model_name",
        "_model_version",
        "_output_names",
        "_parameters",
        "_release",
        "_request_id",
        "_requested",
        "_sender",
        "_source",
        "_timeout",
        "_trace",
    )

    def __init__(self, request_id: str = "", correlation_id: int | str = 0,
                 inputs: Sequence[Tensor] = (), requested_output_names: Iterable[str] = (),
                 model_name: str = "", model_version: int = -1, flags: int = 0,
                 timeout: int = 0, preferred_memory: PreferredMemory | None = None,
                 trace: Any = None, parameters: dict[str, Any] | None = None) -> None:
        # Triton's binding checks argument types (TypeError) and that inputs are tensors
        _check_type("InferenceRequest", "request_id", request_id, (str, bytes))
        _check_type("InferenceRequest", "correlation_id", correlation_id, (int, str, bytes))
        _check_type("InferenceRequest", "model_name", model_name, (str, bytes))
        _check_type("InferenceRequest", "model_version", model_version, int)
        _check_type("InferenceRequest", "flags", flags, int)
        if inputs is None or requested_output_names is None:
            raise TypeError("InferenceRequest(): inputs and requested_output_names must be "
                            "lists")
        self._source = None
        self._inputs = list(inputs)
        if not all(isinstance(t, Tensor) for t in self._inputs):
            raise TritonModelException("InferenceRequest(): every input must be a "
                                       "pb_utils.Tensor")
        self._output_names = None
        self._requested = set(requested_output_names)
        if not all(isinstance(n, (str, bytes)) for n in self._requested):
            raise TypeError("InferenceRequest(): requested_output_names must be strings")
        # Triton's C++ side takes bytes for a str (a name read from a BYTES tensor).
        self._request_id = _text(request_id)
        self._correlation_id = correlation_id
        self._model_name = _text(model_name)
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters = _parameters_json(parameters or {})
        self._sender = None
        self._trace = trace if isinstance(trace, _InferenceTrace) else None

    @classmethod
    def _wrap(cls, source: Any, output_names: frozenset[str]) -> InferenceRequest:
        """A view of a ``naiad.types.InferenceRequest``; ``output_names`` are the model's."""
        request = object.__new__(cls)
        request._source = source
        request._inputs = None
        request._output_names = output_names
        request._parameters = None
        request._flags = None
        request._sender = None
        request._trace = None
        return request

    def inputs(self) -> list[Tensor]:
        inputs = self._inputs
        if inputs is None:
            inputs = self._inputs = [_input_tensor(t.name, t.data, t.datatype)
                                     for t in self._source.inputs.values()]
        return inputs

    def request_id(self) -> str:
        return self._request_id if self._source is None else self._source.id

    def correlation_id(self) -> int | str:
        """The sequence id (an int or a str), 0 outside a sequence."""
        if self._source is None:
            return self._correlation_id
        return self._source.parameters.get("sequence_id", 0)

    def flags(self) -> int:
        """``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`` / ``_END`` bits."""
        flags = self._flags
        if flags is None:
            params = self._source.parameters
            flags = 0
            if params:
                if params.get("sequence_start"):
                    flags |= TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
                if params.get("sequence_end"):
                    flags |= TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
            self._flags = flags
        return flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        """The request's timeout in microseconds, 0 when none was given."""
        if self._source is None:
            return self._timeout
        return int(self._source.parameters.get("timeout", 0))

    def parameters(self) -> str:
        """The request's parameters as a JSON object string (``"{}"`` when none)."""
        text = self._parameters
        if text is None:
            params = self._source.parameters
            if params:
                params = {k: v for k, v in params.items() if k not in _RESERVED_PARAMETERS}
            text = self._parameters = (
                json.dumps(params, separators=(",", ":")) if params else "{}")
        return text

    def requested_output_names(self) -> set[str]:
        """The outputs to compute: the ones the client asked for, else every output."""
        if self._source is None:
            return self._requested
        requested = self._source.requested_outputs
        if requested is None:
            return set(self._output_names)
        return {output.name for output in requested}

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses: any number for a decoupled model, the
        last one with ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``; exactly one, final, for
        other models (which then return None from ``execute``)."""
        sender = self._sender
        if sender is None:
            # not self.is_cancelled: a sender that refers back to its request makes a
            # cycle, and a late request let go of unanswered must be freed at once (see
            # naiad_stub_runner._Late)
            cancellation = getattr(self._source, "cancellation", None)
            sender = self._sender = InferenceResponseSender(
                cancelled=None if cancellation is None else lambda: cancellation.cancelled)
            # execute returned without this request's response: it may still be sent
            sender._late = getattr(self, "_late", None)
        return sender

    def is_cancelled(self) -> bool:
        """Whether the client gave up on this request (cancelled its gRPC call, let the
        deadline pass, or disconnected while naiad watched): a long or streaming model
        may stop early. The model is never interrupted."""
        cancellation = getattr(self._source, "cancellation", None)
        return cancellation is not None and cancellation.cancelled

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: run this request again once
        ``execute`` returned (an iterative sequence's next step; execute returns None for
        it); ``TRITONSERVER_REQUEST_RELEASE_ALL``: done with it (the default). naiad runs a
        rescheduled request again on the same instance, before its next batch."""
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL,
                         TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(f"set_release_flags(): unsupported flags {flags!r}: "
                                       f"TRITONSERVER_REQUEST_RELEASE_ALL or "
                                       f"TRITONSERVER_REQUEST_RELEASE_RESCHEDULE")
        if self._source is None:
            raise TritonModelException("set_release_flags() is for the requests execute "
                                       "was given, not for a BLS request")
        global _reschedules
        self._release = flags
        if flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            _reschedules += 1

    def release_flags(self) -> int:
        """The flags :meth:`set_release_flags` set (``TRITONSERVER_REQUEST_RELEASE_ALL``
        when none)."""
        return getattr(self, "_release", TRITONSERVER_REQUEST_RELEASE_ALL)

    def trace(self) -> _InferenceTrace:
        """This request's trace, for the BLS requests made for it."""
        if self._source is None:
            return self._trace or _InferenceTrace()
        return _InferenceTrace(getattr(self._source, "trace", None))

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` and wait: its response, or with
        ``decoupled=True`` an iterator of its responses (any number; the last may be empty,
        the final flag alone). A failure is a response whose ``has_error()`` is true."""
        calls = _model_calls()
        if decoupled:
            responses = ResponseIterator()
            responses._cancel = calls.infer(self, True, responses._put)
            return responses
        answer = _OneResponse()
        calls.infer(self, False, answer.put)
        return answer.get()

    def async_exec(self, decoupled: bool = False) -> Any:
        """:meth:`exec` for an ``async def execute``: returns an awaitable at once, so
        several calls run concurrently (``asyncio.gather``). With ``decoupled=True`` it
        resolves to the iterator of responses."""
        calls = _model_calls()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if decoupled:
            # As Triton's: the awaitable resolves once the first response is there, so
            # iterating never blocks the event loop on it (concurrent calls stay concurrent)
            responses = ResponseIterator()

            def first(response: InferenceResponse, final: bool) -> None:
                responses._put(response, final)
                if not responses._arrived:
                    responses._arrived = True
                    loop.call_soon_threadsafe(_resolve, future, responses)

            responses._cancel = calls.infer(self, True, first)
            return future

        def resolve(response: InferenceResponse, final: bool) -> None:
            loop.call_soon_threadsafe(_resolve, future, response)

        calls.infer(self, False, resolve)
        return future


class InferenceResponse:
    """The response to one request: output tensors, or an error."""

    __slots__ = ("_error", "_output_tensors", "_parameters")

    def __init__(self, output_tensors: Sequence[Tensor] = (),
                 error: TritonError | None = None,
                 parameters: dict[str, Any] | None = None) -> None:
        if type(output_tensors) is not list:
            if output_tensors is None:  # as Triton's binding: a list, possibly empty
                raise TypeError("InferenceResponse(): output_tensors must be a list of "
                                "pb_utils.Tensor, not None")
            output_tensors = list(output_tensors)
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):  # as Triton's binding: None is a model error
                error = TritonModelException if tensor is None else _OutputTypeError
                raise error(f"Expected a 'Tensor' object in the output_tensors of an "
                            f"InferenceResponse, found type '{type(tensor)}'.")
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse(): error must be a TritonError, "
                            f"not {type(error).__name__}")
        if parameters:
            _check_parameters(parameters)
        self._output_tensors = output_tensors
        self._error = error
        self._parameters = parameters

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response's parameters as a JSON object string."""
        return json.dumps(self._parameters or {})


class InferenceResponseSender:
    """Sends a request's responses (``request.get_response_sender()``).

    For a decoupled model, any number of responses from any thread, during ``execute`` or
    after it returned, the last with ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``; they reach
    the client as they are sent. For other models, exactly one response, with the final flag
    or followed by it, during ``execute`` (it then stands for execute's return value: execute
    returns None for that request) or after execute returned None for the request (it
    reaches the client when sent), as in Triton; Triton's errors for a second response or a
    final flag before any response.
    """

    __slots__ = ("_cancelled", "_closed", "_emit", "_late", "_lock", "_response", "_sent")

    def __init__(self, emit: Callable[[InferenceResponse | None, bool], None] | None = None,
                 cancelled: Callable[[], bool] | None = None) -> None:
        # emit(response, final): the execution mode's way to the client (decoupled models);
        # None: an ordinary model's one response, kept for execute's return.
        self._emit = emit
        self._cancelled = cancelled
        self._response: InferenceResponse | None = None
        self._closed = False
        self._sent = False  # an ordinary model's one response was sent (or returned)
        # An ordinary model's request that execute returned None for: late(response) sends
        # its response on its own (the runner sets it); None during execute.
        self._late: Any = None
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(f"send(): response must be an InferenceResponse, "
                            f"not {type(response).__name__}")
        if response is None and not final:
            raise TritonModelException("Inference Response object must be provided when the "
                                       "response flags is set to zero.")
        with self._lock:
            if self._emit is None:  # an ordinary model: one response, then the final flag
                if response is not None and self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response.")
                if response is None and not self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response.")
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has "
                                           "been closed.")
            if self._emit is None:
                if response is not None:
                    late = self._late
                    if late is not None:  # execute returned: it goes to the client now
                        late.send(response)
                    else:
                        self._response = response
                    self._sent = True
            else:
                self._emit(response, final)
            self._closed = final

    def is_cancelled(self) -> bool:
        """Whether the client gave up on the request (see ``InferenceRequest.is_cancelled``)."""
        return self._cancelled is not None and self._cancelled()


class _OutputTypeError(TypeError):
    """A response made of something other than tensors: a broken execute contract (the
    runner fails the batch as INTERNAL, as it does for other contract breaches)."""


def _check_type(owner: str, name: str, value: Any, types: Any) -> None:
    """TypeError as Triton's binding raises it for an argument of the wrong type (an int
    argument takes anything with ``__index__``, numpy integers included)."""
    allowed = types if isinstance(types, tuple) else (types,)
    if isinstance(value, allowed) or (int in allowed and hasattr(value, "__index__")):
        return
    raise TypeError(f"{owner}(): {name} must be "
                    f"{' or '.join(t.__name__ for t in allowed)}, not {type(value).__name__}")


def _text(value: Any) -> Any:
    """A str given as bytes (``np.bytes_`` too), decoded as UTF-8; anything else as is."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _check_parameters(parameters: dict[str, Any]) -> None:
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}")


def _parameters_json(parameters: dict[str, Any]) -> str:
    _check_parameters(parameters)
    return json.dumps(parameters)


# --- BLS requests and responses in plain values (both execution modes) ---------------


def _describe_call(request: InferenceRequest) -> dict[str, Any]:
    """What a BLS request asks for, in plain values (its tensors aside): the model, the
    version (-1: the latest), the id, the outputs (None: all) and the parameters, with the
    correlation id, flags and timeout as the server's request parameters; ``trace`` when it
    was made with a traced request's trace (in a worker, that trace's id)."""
    parameters: dict[str, Any] = json.loads(request._parameters) if request._parameters else {}
    if request._correlation_id:
        parameters["sequence_id"] = request._correlation_id
    flags = request._flags or 0
    if flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
        parameters["sequence_start"] = True
    if flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
        parameters["sequence_end"] = True
    if request._timeout:
        parameters["timeout"] = int(request._timeout)
    call = {"model_name": request._model_name, "model_version": int(request._model_version),
            "id": request._request_id, "outputs": sorted(request._requested) or None,
            "parameters": parameters}
    if request._trace is not None and request._trace._handle is not None:
        call["trace"] = request._trace._handle  # the server's trace, or its id in a worker
    return call


# naiad's status names -> TritonError codes, for the errors BLS responses carry.
_STATUS_CODES = {
    "INTERNAL": _ErrorCode.INTERNAL, "NOT_FOUND": _ErrorCode.NOT_FOUND,
    "INVALID_ARG": _ErrorCode.INVALID_ARG, "UNAVAILABLE": _ErrorCode.UNAVAILABLE,
    "UNSUPPORTED": _ErrorCode.UNSUPPORTED, "ALREADY_EXISTS": _ErrorCode.ALREADY_EXISTS,
    "CANCELLED": _ErrorCode.CANCELLED,
}


def _call_response(outputs: Iterable[tuple[str, str, np.ndarray]],
                   parameters: dict[str, Any] | None,
                   error: tuple[str, str] | None) -> InferenceResponse:
    """A BLS response as the model sees it, from (name, datatype, array) outputs, the
    response's parameters and (status name, message) when it failed."""
    if error is not None:
        return InferenceResponse(error=TritonError(error[1], _STATUS_CODES.get(
            error[0], _ErrorCode.INTERNAL)))
    response = InferenceResponse([_input_tensor(name, array, datatype)
                                  for name, datatype, array in outputs])
    response._parameters = parameters or None
    return response
