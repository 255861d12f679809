"""The generate extension's JSON, both ways (no I/O here: :mod:`.generate` serves it).

A generate request is one flat JSON object, as tritonserver 2.51 reads it
(tests/compat/TRITON_OBSERVED.md, "Generate extension"):

- a key that names an input of the model is that input: a scalar is one element, a list
  (flat) its elements; the tensor's shape is ``[n]`` for an input of one dimension whose
  size is -1 or n (``[1, n]`` for a batching model: one request). naiad also takes an input
  whose dimensions are all fixed and hold n elements, shaped as the config says;
- ``id`` is the request id (a string);
- ``parameters`` is an object whose entries are read the same way (an input's name makes
  an input, anything else a parameter);
- every other key is a request parameter, a string, number or boolean.

The answer is one JSON object with sorted keys: each output by name (its single element
as a scalar, or a flat list), ``model_name``, ``model_version``, and ``id`` when the request
had one.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from naiad.datatypes import format_shape
from naiad.errors import invalid_arg
from naiad.frontends.http.codec import json_size_bounds, response_too_large
from naiad.frontends.tensors import from_list, to_list
from naiad.models.signature import ModelSignature, TensorSpec
from naiad.types import InferenceRequest, InferenceResponse, Tensor

ID = "id"
PARAMETERS = "parameters"
# tritonserver's words for a value that fits no input shape (HTTP 400)
_NO_SHAPE = "The schema can not convert input '{name}' to tensor with proper shape"


def decode_generate(signature: ModelSignature, version: int, body: bytes) -> InferenceRequest:
    """The :class:`InferenceRequest` a generate body stands for; an INVALID_ARG error that
    names the model (and the input or parameter) when it stands for none."""
    model = signature.name
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"model '{model}': the generate request body is not valid JSON: "
                          f"{exc}") from None
    if not isinstance(doc, dict):
        raise invalid_arg(f"model '{model}': the generate request body must be a JSON "
                          f"object, not {_json_type(doc)}")
    request_id = doc.get(ID, "")
    if not isinstance(request_id, str):
        raise invalid_arg(f"model '{model}': the generate request's 'id' must be a string, "
                          f"not {_json_type(request_id)}")
    inputs: dict[str, Tensor] = {}
    parameters: dict[str, Any] = {}
    _read_keywords(signature, doc, inputs, parameters, "")
    nested = doc.get(PARAMETERS)
    if nested is not None:
        if not isinstance(nested, dict):
            raise invalid_arg(f"model '{model}': 'parameters' of a generate request must be "
                              f"a JSON object, not {_json_type(nested)}")
        _read_keywords(signature, nested, inputs, parameters, "'parameters': ")
    return InferenceRequest(model_name=model, model_version=version, inputs=inputs,
                            id=request_id, parameters=parameters)


def _read_keywords(signature: ModelSignature, doc: dict, inputs: dict[str, Tensor],
                   parameters: dict[str, Any], where: str) -> None:
    top = not where
    for key, value in doc.items():
        if top and key in (ID, PARAMETERS):
            continue
        spec = signature.inputs.get(key)
        if spec is not None:
            if key in inputs:
                raise invalid_arg(f"model '{signature.name}': {where}input '{key}' already "
                                  f"exists in request")
            inputs[key] = _tensor(signature, spec, value)
        elif isinstance(value, (str, int, float)):  # bool is an int
            parameters[key] = value
        else:
            raise invalid_arg(f"model '{signature.name}': {where}parameter '{key}' has "
                              f"invalid type ({_json_type(value)}): it should be a string, "
                              f"a number or a boolean ('{key}' is no input of the model)")


def _tensor(signature: ModelSignature, spec: TensorSpec, value: Any) -> Tensor:
    values = value if isinstance(value, list) else [value]
    count = len(values)
    dims = spec.dims
    if len(dims) == 1 and dims[0] in (-1, count):
        shape: tuple[int, ...] = (count,)
    elif all(d >= 0 for d in dims) and math.prod(dims) == count:
        shape = dims
    else:
        raise invalid_arg(f"{_NO_SHAPE.format(name=spec.name)}: input '{spec.name}' of model "
                          f"'{signature.name}' has shape {format_shape(dims)}, the request "
                          f"gives {count} element(s)")
    if signature.max_batch_size > 0:
        shape = (1, *shape)
    return from_list(signature.name, spec.name, spec.datatype, shape, values)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def encode_generate(request: InferenceRequest, response: InferenceResponse,
                    max_size: int | None = None) -> bytes:
    """The JSON object of one successful response; RESOURCE_EXHAUSTED when it would exceed
    ``max_size`` bytes (``--max-response-size``: refused before it is written when even the
    shortest text of the outputs would)."""
    if max_size is not None and response.outputs:
        bounds = [json_size_bounds(tensor)[0] for tensor in response.outputs]
        if sum(bounds) > max_size:
            largest = response.outputs[bounds.index(max(bounds))].name
            raise response_too_large(request.model_name, max_size, sum(bounds), largest,
                                     exact=False)
    doc: dict[str, Any] = {}
    for tensor in response.outputs:
        values = to_list(tensor)
        doc[tensor.name] = values[0] if len(values) == 1 else values
    doc["model_name"] = request.model_name
    doc["model_version"] = str(request.model_version)
    if request.id:
        doc[ID] = request.id
    body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    if max_size is not None and len(body) > max_size:
        largest = max(response.outputs, key=lambda tensor: tensor.data.size).name
        raise response_too_large(request.model_name, max_size, len(body), largest, exact=True)
    return body
