"""``ModelInferRequest`` -> :class:`InferenceRequest` and :class:`InferenceResponse` ->
``ModelInferResponse``, with Triton's rules for where tensor data lives.

An input takes its data from exactly one place: a registered shared memory region (its
``shared_memory_*`` parameters), its typed ``contents`` field, or the next entry of the
request's ``raw_input_contents`` (index-aligned with the inputs that use neither). Raw bytes
become ``np.frombuffer`` views, never copies. Every output gets one ``raw_output_contents``
entry, empty when the output went to shared memory, as tritonserver does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from naiad.datatypes import NUMPY_DTYPES
from naiad.errors import invalid_arg
from naiad.frontends.parameters import (
    CUSTOM,
    INPUT_PARAMETERS,
    OUTPUT_PARAMETERS,
    REQUEST_PARAMETERS,
    grpc_parameters,
)
from naiad.frontends.tensors import (
    from_list,
    read_shm_input,
    requested_output_target,
    response_too_large,
)
from naiad.shm import Region, SharedMemoryRegistry
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from naiad.wire_tensors import NUMPY_MAX_DIMS, check_header, from_raw, to_raw

ModelInferRequest = service_pb2.ModelInferRequest
ModelInferResponse = service_pb2.ModelInferResponse

# The typed ``contents`` field that carries each datatype (FP16 and BF16 have none: raw only).
CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

_SHM_REGION = "shared_memory_region"


# --- parameters ---------------------------------------------------------------------------


def params_to_dict(params: Any) -> dict[str, Any]:
    """A protobuf map of ``InferParameter`` (or ``ModelRepositoryParameter``) -> plain dict.
    An entry with no value set becomes None."""
    if not params:
        return {}
    out = {}
    for key, value in params.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, which) if which is not None else None
    return out


def set_params(target: Any, params: dict[str, Any]) -> None:
    """Fill a protobuf ``map<string, InferParameter>`` from a plain dict."""
    for key, value in params.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if value > 0x7FFFFFFFFFFFFFFF:
                param.uint64_param = value
            else:
                param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


# --- requests -----------------------------------------------------------------------------


class UndecodableRequest:
    """What a request deserializer returns for bytes that are not its message: grpc would
    turn an exception there into INTERNAL ("Exception deserializing request!"), so the
    handler gets this instead and answers INVALID_ARGUMENT (``listener._decoded``). In a
    stream it is refused like any bad request, and the stream goes on; ``model_name`` and
    ``id`` are empty for that."""

    __slots__ = ("message",)
    model_name = ""
    id = ""

    def __init__(self, message: str) -> None:
        self.message = message


ShmTargets = dict[str, tuple[Region, int, int]]


def decode_request(model_name: str, version: int, msg: Any, registry: SharedMemoryRegistry,
                   max_bytes: int | None = None) -> tuple[InferenceRequest, ShmTargets | None]:
    """Turn ``msg`` (a ``ModelInferRequest`` for ``model_name``) into an
    :class:`InferenceRequest`; raise an INVALID_ARG error naming the model and tensor.
    ``max_bytes`` (``--http-max-input-size``) bounds what an input's shape may describe.

    Also returns the outputs to write to shared memory: name -> (region, offset, byte_size),
    or None when there are none."""
    request = _plain_request(model_name, version, msg)
    if request is not None:
        return request, None
    raw_contents = msg.raw_input_contents
    raw_count = len(raw_contents)
    raw_index = 0
    inputs: dict[str, Tensor] = {}
    for item in msg.inputs:
        name = item.name
        datatype = item.datatype
        shape = tuple(item.shape[:])  # [:] is the fast way out of a repeated field
        if not name or datatype not in NUMPY_DTYPES or (shape and min(shape) < 0):
            check_header(model_name, name, datatype, shape)  # raises, naming what is wrong
        params = item.parameters
        if params and _SHM_REGION in params:
            if item.HasField("contents"):
                raise invalid_arg(f"input '{name}' of model '{model_name}' gives both a "
                                  f"shared memory region and 'contents': use one")
            tensor = read_shm_input(registry, model_name, name, datatype, shape,
                                    grpc_parameters(params, INPUT_PARAMETERS,
                                                    f"input '{name}' of model "
                                                    f"'{model_name}'"), max_bytes)
        elif item.HasField("contents"):
            if raw_count:
                raise invalid_arg(f"input '{name}' of model '{model_name}' has 'contents' but "
                                  f"the request also uses raw_input_contents: when "
                                  f"raw_input_contents is used, every input must use it")
            tensor = _from_contents(model_name, name, datatype, shape, item.contents,
                                    max_bytes)
        elif raw_index < raw_count:
            tensor = from_raw(model_name, name, datatype, shape, raw_contents[raw_index],
                              max_bytes)
            raw_index += 1
        else:
            raise invalid_arg(f"unable to find data for input tensor '{name}' for model "
                              f"'{model_name}' in request: it has no shared memory region, "
                              f"no 'contents' and no raw_input_contents entry "
                              f"({raw_count} given for {len(msg.inputs)} inputs)")
        if name in inputs:
            raise invalid_arg(f"input '{name}' of model '{model_name}' is given twice")
        inputs[name] = tensor
    if raw_index != raw_count:
        raise invalid_arg(f"model '{model_name}': the request has {raw_count} "
                          f"raw_input_contents entries but only {raw_index} input(s) take "
                          f"their data from them")
    requested = None
    to_shm = None
    if msg.outputs:
        requested = []
        for out in msg.outputs:
            out_params = grpc_parameters(
                out.parameters, OUTPUT_PARAMETERS,
                f"output '{out.name}' of model '{model_name}'") if out.parameters else {}
            if out_params:
                target = requested_output_target(registry, model_name, out.name, out_params)
                if target is not None:
                    if to_shm is None:
                        to_shm = {}
                    to_shm[out.name] = target
            requested.append(RequestedOutput(out.name, out_params))
    request = InferenceRequest(
        model_name=model_name,
        model_version=version,
        inputs=inputs,
        id=msg.id,
        requested_outputs=requested,
        parameters=grpc_parameters(msg.parameters, REQUEST_PARAMETERS,
                                   f"model '{model_name}'", CUSTOM) if msg.parameters else {},
    )
    return request, to_shm


def _plain_request(model_name: str, version: int, msg: Any) -> InferenceRequest | None:
    """The usual request in one pass: every input's data in ``raw_input_contents``, of a
    numeric datatype, with no parameters; outputs by name alone; no parameters. None for any
    other, and for one that breaks a rule: :func:`decode_request`'s general way reads it,
    or says what is wrong with it. The same request as the general way's, the checks of
    ``check_header``, ``check_shape`` and ``from_raw`` folded in (issue 26,
    ``tests/core/frontends/grpc/test_grpc_codec_plain.py``)."""
    if msg.parameters:
        return None
    items, raw_contents = msg.inputs, msg.raw_input_contents
    if len(items) != len(raw_contents):
        return None
    inputs = {}
    for item, raw in zip(items, raw_contents, strict=True):
        name, datatype = item.name, item.datatype
        dtype = _RAW_DTYPES.get(datatype)
        if (dtype is None or not name or name in inputs or item.parameters
                or item.HasField("contents")):
            return None
        shape = tuple(item.shape[:])  # [:] is the fast way out of a repeated field
        if (len(shape) > NUMPY_MAX_DIMS or (shape and min(shape) <= 0)
                or len(raw) != math.prod(shape) * dtype.itemsize):
            return None
        inputs[name] = Tensor(name, datatype, shape, np.frombuffer(raw, dtype).reshape(shape))
    requested = None
    if msg.outputs:
        requested = []
        for out in msg.outputs:
            if out.parameters:
                return None
            requested.append(RequestedOutput(out.name, {}))
    return InferenceRequest(model_name=model_name, model_version=version, inputs=inputs,
                            id=msg.id, requested_outputs=requested, parameters={})


# The numpy dtype of each datatype whose raw form is its array's bytes (all but BYTES).
_RAW_DTYPES = {datatype: dtype for datatype, dtype in NUMPY_DTYPES.items() if dtype is not None}


def _from_contents(model: str, name: str, datatype: str, shape: tuple[int, ...],
                   contents: Any, max_bytes: int | None) -> Tensor:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise invalid_arg(f"input '{name}' of model '{model}': {datatype} data has no typed "
                          f"'contents' field; send it in raw_input_contents")
    for descriptor, _ in contents.ListFields():
        if descriptor.name != field:
            raise invalid_arg(f"input '{name}' of model '{model}' has datatype {datatype} but "
                              f"its data is in contents.{descriptor.name}; {datatype} data "
                              f"goes in contents.{field}")
    return from_list(model, name, datatype, shape, getattr(contents, field), max_bytes)


# --- responses ----------------------------------------------------------------------------
#
# Responses are written in protobuf's wire format by hand: a ModelInferResponse is a few
# length-delimited fields, and the part that names the model version is the same for every
# response of that version. That is about five times cheaper than building the message
# object and serializing it, and the output bytes are copied once, into the reply. The tests
# parse every shape of response back with the official ``service_pb2`` classes.

_VARINTS = [bytes([n]) for n in range(128)]


def _varint(n: int) -> bytes:
    if n < 128:
        return _VARINTS[n] if n >= 0 else _varint(n & 0xFFFFFFFFFFFFFFFF)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_field(tag: bytes, value: str) -> bytes:
    data = value.encode("utf-8")
    return tag + _varint(len(data)) + data


class ResponseEncoder:
    """Writes ``ModelInferResponse`` bytes; remembers the constant parts per model version
    and per output name and datatype. A response of more than ``max_bytes``
    (``--max-response-size``; None: no limit) is refused before it is built."""

    _MAX_CACHED = 4096

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self._heads: dict[tuple[str, int], bytes] = {}
        self._outputs: dict[tuple[str, str, tuple[int, ...]], bytes] = {}

    def _head(self, model_name: str, version: int) -> bytes:
        key = (model_name, version)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= self._MAX_CACHED:
                self._heads.clear()
            head = self._heads[key] = (_string_field(b"\x0a", model_name)
                                       + _string_field(b"\x12", str(version)))
        return head

    def _output(self, name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
        """The whole ``outputs`` entry (field 5) of one output tensor."""
        key = (name, datatype, shape)
        entry = self._outputs.get(key)
        if entry is None:
            if len(self._outputs) >= self._MAX_CACHED:
                self._outputs.clear()
            body = _string_field(b"\x0a", name) + _string_field(b"\x12", datatype)
            if shape:
                packed = b"".join([_varint(d) for d in shape])
                body += b"\x1a" + _varint(len(packed)) + packed
            entry = self._outputs[key] = b"\x2a" + _varint(len(body)) + body
        return entry

    def encode(self, request: InferenceRequest, response: InferenceResponse,
               to_shm: ShmTargets | None = None) -> bytes:
        """The serialized ``ModelInferResponse`` for ``response``. Outputs named in
        ``to_shm`` are written to their shared memory region and get an empty raw content
        entry."""
        parts: list[bytes | memoryview] = [self._head(request.model_name,
                                                      request.model_version)]
        if request.id:
            parts.append(_string_field(b"\x1a", request.id))
        raws: list[bytes | memoryview] = []
        largest: tuple[int, str] = (-1, "")
        for tensor in response.outputs:
            name = tensor.name
            shape = tensor.shape
            parts.append(self._output(name, tensor.datatype,
                                      shape if type(shape) is tuple else tuple(shape)))
            raw = to_raw(tensor)
            if to_shm is not None:
                target = to_shm.get(name)
                if target is not None:
                    region, offset, size = target
                    region.write(offset, size, raw,
                                 f"output '{name}' of model '{request.model_name}'")
                    raws.append(b"\x32\x00")
                    continue
            raws.append(b"\x32" + _varint(len(raw)))
            raws.append(raw)
            if len(raw) > largest[0]:
                largest = (len(raw), name)
        parts.extend(raws)
        if response.parameters:
            # Concatenated messages merge: the parameters go last, encoded by protobuf.
            extra = ModelInferResponse()
            set_params(extra.parameters, response.parameters)
            parts.append(extra.SerializeToString())
        if self.max_bytes is not None:
            # Before the join: the copy into one message is what must not be made.
            total = sum(map(len, parts))
            if total > self.max_bytes:
                raise response_too_large(request.model_name, largest[1], largest[0], total,
                                         self.max_bytes)
        return b"".join(parts)


def stream_response(infer_response: bytes) -> bytes:
    """A serialized ``ModelStreamInferResponse`` holding a serialized ``ModelInferResponse``."""
    return b"\x12" + _varint(len(infer_response)) + infer_response


def _final_parameter(final: bool) -> bytes:
    message = ModelInferResponse()
    message.parameters["triton_final_response"].bool_param = final
    return message.SerializeToString()


# tritonserver sets ``triton_final_response`` on every response of a stream: true on the
# one answer of an ordinary model, and on the last response of a decoupled one. Appended to
# an encoded ModelInferResponse (concatenated messages merge their parameters).
FINAL = _final_parameter(True)
NOT_FINAL = _final_parameter(False)


def stream_error(message: str, request_id: str, model_name: str = "",
                 final: bool | None = None) -> bytes:
    """A ``ModelStreamInferResponse`` reporting an error, with ``infer_response`` as
    tritonserver fills it: the request id alone for a request refused before it ran; the
    model name and ``triton_final_response`` too (``final`` not None) for an error the
    model's inference produced."""
    inner = _string_field(b"\x0a", model_name) if model_name else b""
    if request_id:
        inner += _string_field(b"\x1a", request_id)
    if final is not None:
        inner += FINAL if final else NOT_FINAL
    return _string_field(b"\x0a", message) + b"\x12" + _varint(len(inner)) + inner


def stream_empty_final(model_name: str, request_id: str) -> bytes:
    """The response that only says "final" (``triton_enable_empty_final_response``): the
    model name, the request id and ``triton_final_response`` true, no outputs (and, as
    tritonserver sends it, no model version)."""
    inner = _string_field(b"\x0a", model_name)
    if request_id:
        inner += _string_field(b"\x1a", request_id)
    inner += FINAL
    return b"\x12" + _varint(len(inner)) + inner
