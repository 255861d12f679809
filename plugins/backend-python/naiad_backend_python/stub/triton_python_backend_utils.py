"""``triton_python_backend_utils`` for naiad: the module Triton Python models import as
``pb_utils``, with the names and behaviour of Triton's (tritonserver 2.51, python_backend).

In Triton part of this module is written in C++. In naiad everything is Python, and the same
file serves both execution modes: in a model's worker process (isolated, the default) it is
the top-level module found beside ``naiad_stub_main.py``, and inside the server (in-process
mode) the top-level ``triton_python_backend_utils`` module is this one too. It needs only
numpy (and ml_dtypes for BF16), so it runs in any Python 3.9 or newer a model's environment
brings. Tensors wrap numpy arrays without copying them; BYTES tensors are numpy object
arrays of ``bytes``.

It is long because Triton's is one module that models import whole; custom metrics live in
``naiad_stub_metrics`` and are re-exported here.

Calls to other models (BLS: ``InferenceRequest.exec`` / ``async_exec``; and
``is_model_ready``, ``load_model``, ``unload_model``) go through the execution mode's
:class:`_ModelCalls`: the server's own models in-process, messages to the server from a
worker.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import naiad_stub_dlpack as _dlpack
import naiad_stub_errors as _errors
import naiad_stub_wire as _wire
import numpy as np
from naiad_stub_metrics import MetricFamily as MetricFamily

NUMPY_DTYPES = _wire.NUMPY_DTYPES

# --- data types -------------------------------------------------------------------------

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType values, the numbers triton_dtype() and the converters use.
_TRITON_CODES = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
    "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
}
_CODE_TO_NUMPY: dict[int, Any] = {
    code: (np.object_ if NUMPY_DTYPES[name] is None else NUMPY_DTYPES[name].type)  # type: ignore[union-attr]
    for name, code in _TRITON_CODES.items() if name in NUMPY_DTYPES
}
# numpy dtype -> V2 datatype name, from naiad's one datatype table.
_DATATYPE_OF: dict[np.dtype, str] = {
    dtype: name for name, dtype in NUMPY_DTYPES.items() if dtype is not None
}
_DATATYPE_OF[np.dtype(object)] = "BYTES"


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType number -> numpy type (None when unknown)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> TRITONSERVER_DataType number (None when unsupported)."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    name = _datatype_of(dtype)
    return None if name is None else _TRITON_CODES[name]


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (config data_type name -> numpy type)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def _datatype_of(dtype: np.dtype) -> str | None:
    name = _DATATYPE_OF.get(dtype)
    if name is None and dtype.kind == "S":  # np.bytes_ arrays are BYTES, as in Triton
        return "BYTES"
    return name


# --- BYTES tensors ----------------------------------------------------------------------


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """A BYTES tensor (object or ``np.bytes_`` array) -> each element as a 4-byte
    little-endian length and its bytes, in C order. Non-bytes objects are ``str()``-ed and
    UTF-8 encoded. ``()`` for an empty tensor, None for other dtypes (as Triton)."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    return _wire.serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The serialized form of a BYTES tensor -> a flat object array of ``bytes``."""
    return _wire.deserialize_bytes(encoded_tensor)


# --- errors (naiad_stub_errors: the custom metrics raise them too) ----------------------

TritonModelException = _errors.TritonModelException
TritonError = _errors.TritonError
_ErrorCode = _errors.ErrorCode


def _unsupported(what: str) -> TritonModelException:
    return TritonModelException(f"{what} is not supported by naiad's Python backend yet")


# --- tensors ----------------------------------------------------------------------------


class Tensor:
    """A named tensor holding a numpy array (never copied unless it is not C-contiguous)."""

    __slots__ = ("_array", "_datatype", "_name")

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not isinstance(name, (str, bytes)) or numpy_array is None:  # Triton: TypeError
            raise TypeError("Tensor(): expects a name (str) and a numpy array")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = numpy_array if type(numpy_array) is np.ndarray else np.asarray(numpy_array)
        datatype = _DATATYPE_OF.get(array.dtype)
        if datatype is None:
            datatype = _datatype_of(array.dtype)
            if datatype is None:
                raise TritonModelException("NumPy dtype is not supported.")
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array = array
        self._datatype = datatype

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The numpy array itself (input arrays may be read-only: they view request bytes)."""
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType number (``11`` for FP32, ``13`` for BYTES...)."""
        return _TRITON_CODES[self._datatype]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing the data (a copy when the array is read-only, which
        DLPack 0.x cannot express)."""
        return self.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        array = self._array
        if not array.flags.writeable:  # DLPack 0.x cannot say read-only: share a copy
            array = np.array(array, copy=True)
        if self._datatype == "BF16":  # numpy has no DLPack code for it (naiad_stub_dlpack)
            return _dlpack.bf16_capsule(array, stream=stream, **kwargs)
        return array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with ``__dlpack__`` (CPU memory only)."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            array = _dlpack.array_from_dlpack(dlpack_tensor, NUMPY_DTYPES["BF16"])
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TritonModelException(
                f"Tensor.from_dlpack('{name}'): {exc} (naiad's Python backend supports CPU "
                f"DLPack tensors only)") from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


def _input_tensor(name: str, array: np.ndarray, datatype: str) -> Tensor:
    """A tensor over one of the server's input arrays, made without any checks."""
    tensor = _new_tensor(Tensor)
    tensor._name = name
    tensor._array = array
    tensor._datatype = datatype
    return tensor


_new_tensor = object.__new__


# --- requests and responses -------------------------------------------------------------

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


# --- calling other models (BLS) ---------------------------------------------------------


class _ModelCalls:
    """How BLS calls leave the model: the execution mode installs one
    (:func:`_set_model_calls`). ``infer`` starts a request and calls ``on_response(response,
    final)`` from any thread for each of its responses (one, final, unless ``decoupled``);
    it returns a function that cancels the request."""

    def infer(self, request: InferenceRequest, decoupled: bool,
              on_response: Callable[[InferenceResponse, bool], None]) -> Callable[[], None]:
        raise NotImplementedError

    def is_model_ready(self, model_name: str, model_version: str) -> bool:
        raise NotImplementedError

    def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None
                   ) -> str | None:
        """Load a model; None, or why it failed."""
        raise NotImplementedError

    def unload_model(self, model_name: str, unload_dependents: bool) -> str | None:
        """Unload a model; None, or why it failed."""
        raise NotImplementedError


_calls: _ModelCalls | None = None
# BLS works once the model is initialized, as in Triton.
_calls_allowed = False


def _set_model_calls(calls: _ModelCalls | None) -> None:
    global _calls
    _calls = calls


def _allow_model_calls() -> None:
    global _calls_allowed
    _calls_allowed = True


def _forbid_model_calls() -> None:
    """From ``finalize`` on, BLS raises again (Triton: only during ``execute``)."""
    global _calls_allowed
    _calls_allowed = False


def _model_calls() -> _ModelCalls:
    if _calls is None or not _calls_allowed:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return _calls


class _OneResponse:
    """Waits for the one response of a non-decoupled BLS call."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[InferenceResponse] = queue.SimpleQueue()

    def put(self, response: InferenceResponse, final: bool) -> None:
        if final:
            self._queue.put(response)

    def get(self) -> InferenceResponse:
        return self._queue.get()


class ResponseIterator:
    """The responses of a decoupled BLS call, in the order they arrive; iterating waits
    for each. The last one may have no outputs (the final flag alone). ``cancel()`` asks
    the called model to stop (its requests see ``is_cancelled()``)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[InferenceResponse, bool]] = queue.SimpleQueue()
        self._done = False
        self._cancel: Callable[[], None] | None = None
        self._arrived = False  # a response (or the final flag) came: async_exec resolves

    def _put(self, response: InferenceResponse, final: bool) -> None:
        self._queue.put((response, final))

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        response, final = self._queue.get()
        self._done = final
        return response

    def cancel(self) -> None:
        if self._cancel is not None and not self._done:
            self._cancel()


def _resolve(future: asyncio.Future, response: Any) -> None:
    if not future.done():
        future.set_result(response)


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


# --- lookups ----------------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input called ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output called ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry called ``name`` of a model config dict, or None."""
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry called ``name`` of a model config dict, or None."""
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config dict sets ``model_transaction_policy { decoupled: true }``."""
    if "model_transaction_policy" in model_config:
        return bool(model_config["model_transaction_policy"].get("decoupled", False))
    return False


# --- the model's directory --------------------------------------------------------------

_current = threading.local()


def get_model_dir() -> str:
    """The folder holding the running model's file (``<repository>/<model>/<version>``).

    naiad sets it for the thread that runs a model's ``auto_complete_config``,
    ``initialize``, ``execute`` and ``finalize``; in a worker process, which serves one
    model, every thread sees it.
    """
    return getattr(_current, "model_dir", _process_model_dir)


_process_model_dir = ""


def _set_model_dir(path: str, whole_process: bool = False) -> None:
    global _process_model_dir
    _current.model_dir = path
    if whole_process:
        _process_model_dir = path


# --- auto-complete ----------------------------------------------------------------------


class ModelConfig:
    """The model configuration ``TritonPythonModel.auto_complete_config`` receives and
    returns. Only inputs, outputs, max_batch_size, dynamic batching and the transaction
    policy may be changed, with the checks Triton makes."""

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    f"scheduling_choice as 'dynamic_batching'")
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name
        label = f"{kind} '{tensor.get('name', '')}'"
        for key in tensor:
            if key not in valid:
                allowed = ", ".join(f"'{v}'" for v in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(f"{label} in auto-complete-config function for model "
                                 f"'{model}' contains property other than {allowed}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} in auto-complete-config function for model '{model}' "
                             f"is missing 'name' property.")
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} in auto-complete-config function for model "
                                 f"'{model}' is missing '{key}' property.")
        existing = self._model_config.setdefault(kind, [])
        for current in existing:
            if current.get("name") != tensor["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{current_type} for {kind} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}")
            if current.get("dims") and current["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims "
                    f"{current['dims']}")
            if ("optional" in current and "optional" in tensor
                    and current["optional"] != tensor["optional"]):
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}")
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        existing.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        model = self._name
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(f"model transaction property in auto-complete-config "
                                 f"function for model '{model}' contains property other "
                                 f"than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(f"trying to change decoupled property in auto-complete-config "
                                 f"for model '{model}', which is already set to "
                                 f"'{policy['decoupled']}'.")
            policy["decoupled"] = wanted


# --- logging ----------------------------------------------------------------------------

_log = logging.getLogger("naiad.model")


class Logger:
    """Writes a model's log lines to Python logging, logger ``naiad.model``."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    # Triton's binding takes a str message and a LogLevel (not a plain int): TypeError else

    @staticmethod
    def log(message: str, level: Logger.LogLevel = LogLevel.INFO) -> None:
        if type(level) is not Logger.LogLevel:
            raise TypeError(f"Logger.log(): level must be a pb_utils.Logger.LogLevel, not "
                            f"{type(level).__name__}")
        _log.log(_LEVELS[level], "%s", _message(message), stacklevel=2)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug("%s", _message(message), stacklevel=2)


def _message(message: Any) -> str:
    if not isinstance(message, str):
        raise TypeError(f"Logger: the message must be a str, not {type(message).__name__}")
    return message


_LEVELS = {
    Logger.LogLevel.INFO: logging.INFO,
    Logger.LogLevel.WARNING: logging.WARNING,
    Logger.LogLevel.ERROR: logging.ERROR,
    Logger.LogLevel.VERBOSE: logging.DEBUG,
}


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) the server's model ``model_name``, ``config`` (JSON) overriding its
    config.pbtxt, as the repository API does: the server must run with
    ``--model-control-mode=explicit``. Raises :class:`TritonModelException` saying why it
    failed.

    ``files`` deploys a model that is not in the repository: ``{"file:1/model.onnx":
    content}``, each key a ``file:`` path inside the model folder and each value the file's
    bytes, ``config`` its configuration (required then). The server writes them into a
    private folder and loads the model from there; a later load without files reads the
    repository again."""
    if files:
        for key, content in files.items():
            if not isinstance(key, str) or not isinstance(content, (bytes, bytearray,
                                                                     memoryview)):
                raise TritonModelException(
                    f"load_model('{model_name}'): files maps 'file:<path>' names to bytes; "
                    f"got {type(key).__name__} -> {type(content).__name__}")
        files = {key: bytes(content) for key, content in files.items()}
    error = _model_calls().load_model(model_name, config, files)
    if error is not None:
        raise TritonModelException(error)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload the server's model ``model_name`` (explicit model control mode only); the
    ensembles that call it are unloaded with it. Raises :class:`TritonModelException`."""
    error = _model_calls().unload_model(model_name, unload_dependents)
    if error is not None:
        raise TritonModelException(error)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the server's model ``model_name`` (version ``model_version``, or the
    latest) is ready to serve."""
    return _model_calls().is_model_ready(model_name, str(model_version))
