"""The V2 inference body over HTTP: JSON tensors and the binary tensor data extension.

A request body is JSON, optionally followed by raw tensor bytes when the
``Inference-Header-Content-Length`` header says where the JSON ends. Inputs with a
``binary_data_size`` parameter take their bytes from that tail, in order.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from naiad.datatypes import NUMPY_DTYPES
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.frontends.parameters import (
    CUSTOM,
    INPUT_PARAMETERS,
    OUTPUT_PARAMETERS,
    REQUEST_PARAMETERS,
    check_json_parameters,
)
from naiad.frontends.tensors import (
    from_list,
    numbers,
    read_shm_input,
    requested_output_target,
    shm_output_target,
    to_list,
)
from naiad.shm import SharedMemoryRegistry
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from naiad.wire_tensors import NUMPY_MAX_DIMS, check_header, from_raw, to_raw

HEADER_LENGTH = "inference-header-content-length"


def decode_request(model_name: str, version: int, body: bytes, header_length: int | None,
                   registry: SharedMemoryRegistry) -> InferenceRequest:
    """Parse an inference request body for ``model_name`` into an :class:`InferenceRequest`."""
    if header_length is None:
        json_part, binary = body, b""
    else:
        if header_length > len(body):
            raise invalid_arg(
                f"model '{model_name}': the Inference-Header-Content-Length header says "
                f"{header_length} bytes of JSON but the body has only {len(body)} bytes")
        view = memoryview(body)
        json_part, binary = view[:header_length], view[header_length:]
    try:
        doc = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"model '{model_name}': the request body is not valid JSON: {exc}"
                          ) from None
    if not isinstance(doc, dict):
        raise invalid_arg(f"model '{model_name}': the request body must be a JSON object")
    if header_length is None:
        request = _plain_request(model_name, version, doc)
        if request is not None:
            return request
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list):
        raise invalid_arg(f"model '{model_name}': the request needs an 'inputs' list")
    inputs = {}
    offset = 0
    for item in raw_inputs:
        if not isinstance(item, dict):
            raise invalid_arg(f"model '{model_name}': each entry of 'inputs' must be an object")
        name = item.get("name")
        datatype = item.get("datatype")
        shape = check_header(model_name, name, datatype, item.get("shape"))
        params = item.get("parameters")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise invalid_arg(f"input '{name}' of model '{model_name}': 'parameters' must be "
                              f"an object")
        if params:
            check_json_parameters(params, INPUT_PARAMETERS,
                                  f"input '{name}' of model '{model_name}'")
        size = params.get("binary_data_size")
        if size is not None:
            if offset + size > len(binary):
                raise invalid_arg(
                    f"input '{name}' of model '{model_name}': binary_data_size {size} at "
                    f"offset {offset} runs past the {len(binary)} bytes of binary data after "
                    f"the JSON header")
            tensor = from_raw(model_name, name, datatype, shape, binary[offset:offset + size])
            offset += size
        elif "shared_memory_region" in params:
            tensor = read_shm_input(registry, model_name, name, datatype, shape, params)
        elif "data" in item:
            tensor = from_list(model_name, name, datatype, shape, item["data"])
        else:
            raise invalid_arg(f"input '{name}' of model '{model_name}' has no 'data', no "
                              f"binary_data_size and no shared memory region")
        if name in inputs:
            raise invalid_arg(f"input '{name}' of model '{model_name}' is given twice")
        inputs[name] = tensor
    if offset != len(binary):
        raise invalid_arg(f"model '{model_name}': {len(binary) - offset} bytes of binary data "
                          f"after the JSON header belong to no input")
    requested = None
    raw_outputs = doc.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise invalid_arg(f"model '{model_name}': 'outputs' must be a list")
        requested = []
        for item in raw_outputs:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise invalid_arg(f"model '{model_name}': each entry of 'outputs' needs a "
                                  f"'name'")
            out_params = item.get("parameters")
            if out_params is None:
                out_params = {}
            elif not isinstance(out_params, dict):
                raise invalid_arg(f"output '{item['name']}' of model '{model_name}': "
                                  f"'parameters' must be an object")
            if out_params:
                check_json_parameters(out_params, OUTPUT_PARAMETERS,
                                      f"output '{item['name']}' of model '{model_name}'")
                _check_output(registry, model_name, item["name"], out_params)
            requested.append(RequestedOutput(item["name"], out_params))
    params = doc.get("parameters")
    if params is None:  # absent, or null: [], 0, "" and false are not "no parameters"
        params = {}
    elif not isinstance(params, dict):
        raise invalid_arg(f"model '{model_name}': request 'parameters' must be an object")
    if params:
        check_json_parameters(params, REQUEST_PARAMETERS, f"model '{model_name}'", CUSTOM)
    request_id = doc.get("id")
    if request_id is None:  # absent or null: no id
        request_id = ""
    elif type(request_id) is not str:  # as tritonserver: a string, never coerced
        raise invalid_arg(f"model '{model_name}': the request 'id' must be a string, got "
                          f"{orjson.dumps(request_id).decode()[:40]}")
    return InferenceRequest(
        model_name=model_name,
        model_version=version,
        inputs=inputs,
        id=request_id,
        requested_outputs=requested,
        parameters=params,
    )


_PLAIN_KEYS = frozenset(("id", "inputs", "outputs"))
_PLAIN_INPUT_KEYS = frozenset(("name", "datatype", "shape", "data"))
_PLAIN_OUTPUT_KEYS = frozenset(("name", "parameters"))
_PLAIN_INT = frozenset((int,))
# The whole of a requested output's parameters the usual request may carry.
_BINARY_DATA = frozenset(("binary_data",))


def _plain_request(model_name: str, version: int, doc: dict[str, Any]
                   ) -> InferenceRequest | None:
    """The usual request in one pass: inputs given as flat JSON lists of numbers or
    booleans (their name, datatype, shape and data, nothing else), outputs by name (with
    ``binary_data`` at most), an id, no parameters. None for any other, and for one that
    breaks a rule: :func:`decode_request`'s general way reads it, or says what is wrong
    with it. The same request as the general way's for less than half the work, on nearly
    every request (issue 26, ``tests/core/frontends/http/test_unit_http_codec_plain.py``)."""
    if not doc.keys() <= _PLAIN_KEYS:
        return None
    raw_inputs = doc.get("inputs")
    if type(raw_inputs) is not list:
        return None
    inputs = {}
    for item in raw_inputs:
        if type(item) is not dict or item.keys() != _PLAIN_INPUT_KEYS:
            return None
        name, datatype, shape, data = item["name"], item["datatype"], item["shape"], item["data"]
        if (type(name) is not str or not name or name in inputs or datatype == "BYTES"
                or datatype not in NUMPY_DTYPES or type(shape) is not list
                or not set(map(type, shape)) <= _PLAIN_INT or len(shape) > NUMPY_MAX_DIMS
                or type(data) is not list or len(data) != math.prod(shape)
                or (shape and min(shape) <= 0) or (data and type(data[0]) is list)):
            return None  # the general way: a rule broken, or something less usual
        try:
            array = numbers(data, datatype)
        except (TypeError, ValueError, OverflowError):
            return None
        shape = tuple(shape)
        inputs[name] = Tensor(name, datatype, shape, array.reshape(shape))
    requested = None
    raw_outputs = doc.get("outputs")
    if raw_outputs is not None:
        if type(raw_outputs) is not list:
            return None
        requested = []
        for item in raw_outputs:
            if type(item) is not dict or not item.keys() <= _PLAIN_OUTPUT_KEYS:
                return None
            name = item.get("name")
            parameters = item.get("parameters")
            if type(name) is not str:
                return None
            if parameters is None:
                parameters = {}
            elif (type(parameters) is not dict or parameters.keys() != _BINARY_DATA
                  or type(parameters["binary_data"]) is not bool):
                return None
            requested.append(RequestedOutput(name, parameters))
    request_id = doc.get("id")
    if request_id is None:
        request_id = ""
    elif type(request_id) is not str:
        return None
    return InferenceRequest(model_name=model_name, model_version=version, inputs=inputs,
                            id=request_id, requested_outputs=requested, parameters={})


def _check_output(registry: SharedMemoryRegistry, model_name: str, name: str,
                  params: dict[str, Any]) -> None:
    """Refuse what tritonserver refuses in a requested output's parameters, before the
    request runs."""
    if "shared_memory_region" in params and params.get("binary_data") is True:
        raise invalid_arg(f"output '{name}' of model '{model_name}': an output can't set both "
                          f"'shared_memory_region' and 'binary_data'")
    requested_output_target(registry, model_name, name, params)


# The bytes one element takes in a JSON answer, its comma included: (fewest, most). Floats
# are written as the shortest text of a double, "0.0" to "-2.2250738585072014e-308".
_JSON_ELEMENT_BYTES = {
    "BOOL": (5, 6), "INT8": (2, 5), "INT16": (2, 7), "INT32": (2, 12), "INT64": (2, 21),
    "UINT8": (2, 4), "UINT16": (2, 6), "UINT32": (2, 11), "UINT64": (2, 21),
    "FP16": (4, 25), "BF16": (4, 25), "FP32": (4, 25), "FP64": (4, 25),
}
# A BYTES element: its quotes and comma, and at most 6 bytes per byte or character
# ("\u0000"; a byte that is not UTF-8 becomes a 2-byte character).
_JSON_STRING_OVERHEAD, _JSON_STRING_MAX_PER_BYTE = 3, 6
# Data that may not fit the limit is written this many elements at a time, the total
# checked after each: the memory held is bounded by the limit, not by the tensor.
_JSON_CHUNK_ELEMENTS = 65536


def response_too_large(model: str, limit: int, size: int, output: str, exact: bool,
                       as_json: bool = True) -> InferenceServerError:
    """RESOURCE_EXHAUSTED (HTTP 413): the answer to a valid request exceeds
    ``--max-response-size``. A 4xx rather than a 5xx: it would be as large on a retry."""
    amount = f"{size} bytes" if exact else f"at least {size} bytes"
    instead = "as binary data or in shared memory" if as_json else "in shared memory"
    return InferenceServerError(
        f"the response of model '{model}' exceeds --max-response-size ({limit} bytes): it "
        f"takes {amount}, most of it output '{output}'; request that output {instead}, or "
        f"raise the limit", Status.RESOURCE_EXHAUSTED)


def json_size_bounds(tensor: Tensor) -> tuple[int, int | None]:
    """The fewest and most bytes of ``tensor``'s data as a JSON list (most: None when it
    cannot be told without writing it)."""
    count = int(tensor.data.size)
    if tensor.datatype != "BYTES":
        low, high = _JSON_ELEMENT_BYTES[tensor.datatype]
        return 2 + low * count, 2 + high * count
    try:
        length = sum(map(len, tensor.data.reshape(-1)))
    except TypeError:  # elements that are not bytes or strings
        return 2 + _JSON_STRING_OVERHEAD * count, None
    return (2 + _JSON_STRING_OVERHEAD * count + length,
            2 + _JSON_STRING_OVERHEAD * count + _JSON_STRING_MAX_PER_BYTE * 4 * length)


def _json_data_within(tensor: Tensor, budget: int) -> tuple[orjson.Fragment | None, int]:
    """``tensor``'s data as a JSON list, written in chunks, and its size; (None, the size
    so far) as soon as that exceeds ``budget`` bytes."""
    flat = tensor.data.reshape(-1)
    parts: list[bytes] = []
    size = 2
    for start in range(0, flat.size, _JSON_CHUNK_ELEMENTS):
        chunk = flat[start:start + _JSON_CHUNK_ELEMENTS]
        text = orjson.dumps(to_list(Tensor(tensor.name, tensor.datatype, chunk.shape, chunk)))
        size += len(text) - 2 + (1 if parts else 0)
        if size > budget:
            return None, size
        parts.append(text[1:-1])
    return orjson.Fragment(b"[" + b",".join(parts) + b"]"), size


def _write_json_data(model: str, pending: list[tuple[dict[str, Any], Tensor]], spent: int,
                     limit: int | None) -> None:
    """Put each pending output's JSON data in its entry. With a ``limit``, refuse before
    writing when even the shortest text would exceed it, and write chunk by chunk, checking,
    when the longest could."""
    if limit is None:
        for entry, tensor in pending:
            entry["data"] = to_list(tensor)
        return
    bounds = [json_size_bounds(tensor) for _, tensor in pending]
    low = spent + sum(b[0] for b in bounds)
    if low > limit:
        largest = max(range(len(pending)), key=lambda i: bounds[i][0])
        raise response_too_large(model, limit, low, pending[largest][1].name, False)
    if all(b[1] is not None for b in bounds) and \
            spent + sum(b[1] for b in bounds) <= limit:  # type: ignore[misc]
        for entry, tensor in pending:
            entry["data"] = to_list(tensor)
        return
    low -= spent
    for (entry, tensor), (low_one, _) in zip(pending, bounds, strict=True):
        low -= low_one  # what the outputs after this one take at least
        data, size = _json_data_within(tensor, limit - spent - low)
        if data is None:
            raise response_too_large(model, limit, spent + size + low, tensor.name, False)
        entry["data"] = data
        spent += size


def encode_response(request: InferenceRequest, response: InferenceResponse, version: int,
                    registry: SharedMemoryRegistry, max_size: int | None = None
                    ) -> tuple[bytes, int | None]:
    """The response body and, when binary tensors follow the JSON, the JSON's length.

    As tritonserver: ``binary_data_output`` applies when the request names no outputs; a
    named output is binary only with its own ``binary_data`` true. An output written to
    shared memory is listed with its name, datatype and shape only (no ``parameters``: the
    client knows where it asked for it, and perf_analyzer reads ``parameters`` as binary
    data). A body that would exceed ``max_size`` bytes (``--max-response-size``) is refused
    before it is built where bounds tell, else as soon as it is known."""
    body = _plain_body(request, response, version, max_size)
    if body is not None:
        return body, None
    binary_default = False
    wanted: dict[str, dict[str, Any]] = {}
    if request.requested_outputs is None:
        binary_default = bool(request.parameters.get("binary_data_output", False))
    else:
        wanted = {o.name: o.parameters for o in request.requested_outputs}
    outputs = []
    chunks: list[bytes | memoryview] = []
    pending: list[tuple[dict[str, Any], Tensor]] = []  # outputs to write as JSON
    binary_size = 0
    largest = ("", -1)  # the output that takes the most binary bytes
    for tensor in response.outputs:
        params = wanted.get(tensor.name) or {}
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        target = shm_output_target(request.model_name, tensor.name, params) if params else None
        if target is not None:
            region, offset, size = target
            raw = to_raw(tensor)
            registry.write(region, offset, size, raw,
                           f"output '{tensor.name}' of model '{request.model_name}'")
        elif params.get("binary_data", binary_default):
            raw = to_raw(tensor)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
            binary_size += len(raw)
            if len(raw) > largest[1]:
                largest = (tensor.name, len(raw))
        else:
            pending.append((entry, tensor))
        outputs.append(entry)
    if max_size is not None and binary_size > max_size:
        raise response_too_large(request.model_name, max_size, binary_size, largest[0], False,
                                 as_json=False)
    if pending:
        _write_json_data(request.model_name, pending, binary_size, max_size)
    # tritonserver's key order: id, model_name, model_version, parameters, outputs
    doc: dict[str, Any] = {"id": request.id} if request.id else {}
    doc["model_name"] = request.model_name
    doc["model_version"] = str(version)
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs
    header = orjson.dumps(doc)
    if max_size is not None and len(header) + binary_size > max_size:
        name = max(pending, key=lambda item: item[1].data.size)[1].name if pending \
            else largest[0]
        raise response_too_large(request.model_name, max_size, len(header) + binary_size,
                                 name, True, as_json=bool(pending))
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _plain_body(request: InferenceRequest, response: InferenceResponse, version: int,
                max_size: int | None) -> bytes | None:
    """The usual answer in one pass: every output a JSON list of numbers or booleans, no
    parameters (the request's, the response's, its outputs' but ``binary_data: false``),
    within ``max_size``. None for any other, which :func:`encode_response`'s general way
    writes (and refuses, when it is too large): the same body for less than half the work,
    on nearly every answer (issue 26,
    ``tests/core/frontends/http/test_unit_http_codec_plain.py``)."""
    if request.parameters or response.parameters:
        return None
    requested = request.requested_outputs
    if requested:
        for output in requested:
            parameters = output.parameters
            if parameters and (len(parameters) != 1
                               or parameters.get("binary_data") is not False):
                return None  # anything but asking for JSON outright
    outputs = []
    most = 0  # bytes the data may take at the most
    for tensor in response.outputs:
        bounds = _JSON_ELEMENT_BYTES.get(tensor.datatype)  # None: BYTES
        if bounds is None:
            return None
        most += 2 + bounds[1] * tensor.data.size
        if max_size is not None and most > max_size:
            return None
        outputs.append({"name": tensor.name, "datatype": tensor.datatype,
                        "shape": list(tensor.shape), "data": to_list(tensor)})
    # tritonserver's key order, as the general way's
    doc: dict[str, Any] = {"id": request.id} if request.id else {}
    doc["model_name"] = request.model_name
    doc["model_version"] = str(version)
    doc["outputs"] = outputs
    body = orjson.dumps(doc)
    if max_size is not None and len(body) > max_size:
        return None
    return body


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
