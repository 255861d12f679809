"""Triton's classification extension: an output asked for with ``classification: N`` (HTTP
output parameter, gRPC ``class_count``) comes back as a BYTES tensor of the top N entries,
each ``"value:index"`` or ``"value:index:label"``.

As Triton does it (its frontends' ``AddClassResults``): for a batching model each batch entry
is ranked on its own and the answer has shape ``[batch, N]``, otherwise ``[N]``; entries are
ranked by value, highest first; N larger than an entry's size gives every element; values are
written as C++'s ``std::to_string`` writes them (``%f`` for floating point: ``0.500000``);
the label is line ``index`` of the output's ``label_filename`` (a file in the model's folder),
left out when there is no such line or it is empty. BYTES and BOOL outputs cannot be ranked
and are refused, naming the model and output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from naiad.errors import invalid_arg
from naiad.types import InferenceRequest, InferenceResponse, Tensor

_RANKABLE = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                       "INT64", "FP16", "FP32", "FP64"})
# (path, mtime_ns) -> labels: a label file is read once per change, not per request
MAX_LABEL_FILES = 64
_LABELS: dict[tuple[str, int], list[str]] = {}


def class_count(model: str, output: str, value: Any) -> int:
    """The ``classification`` parameter of a requested output, checked (a positive int)."""
    if type(value) is not int or value < 1:
        raise invalid_arg(f"output '{output}' of model '{model}': 'classification' must be a "
                          f"positive integer, got {value!r}")
    return value


def classify_response(model: Any, request: InferenceRequest,
                      response: InferenceResponse) -> InferenceResponse:
    """``response`` with every output the request asked to classify replaced by its
    classification. ``model`` is the ModelVersion that ran it (its ``config`` and
    ``context.model_dir``). Cheap when nothing asks for classification."""
    wanted = request.requested_outputs
    if not wanted or not any("classification" in o.parameters for o in wanted):
        return response
    counts = {o.name: class_count(model.name, o.name, o.parameters["classification"])
              for o in wanted if "classification" in o.parameters}
    specs = {o.name: o for o in model.config.output}
    batching = model.config.max_batch_size > 0
    outputs = []
    for tensor in response.outputs:
        count = counts.get(tensor.name)
        if count is not None:
            spec = specs.get(tensor.name)
            labels = _labels(model.context.model_dir, spec.label_filename) \
                if spec is not None and spec.label_filename else []
            tensor = classify(model.name, tensor, count, labels, batching)
        outputs.append(tensor)
    response.outputs = outputs
    return response


def classify(model: str, tensor: Tensor, count: int, labels: list[str],
             batching: bool) -> Tensor:
    """The classification of one output tensor (see the module docstring)."""
    if tensor.datatype not in _RANKABLE:
        raise invalid_arg(f"output '{tensor.name}' of model '{model}': classification needs "
                          f"a numeric output, not {tensor.datatype}")
    data = np.asarray(tensor.data)
    per_entry = batching and data.ndim >= 1  # each batch entry ranked on its own
    rows = data.reshape(data.shape[0] if per_entry else 1, -1)
    k = min(count, rows.shape[1])
    floating = data.dtype.kind == "f"
    out = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        # highest first; equal values keep index order
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for j, index in enumerate(order):
            value = row[index]
            text = f"{float(value):f}" if floating else str(int(value))
            text += f":{int(index)}"
            if index < len(labels) and labels[index]:
                text += f":{labels[index]}"
            out[r, j] = text.encode()
    if not per_entry:
        out = out.reshape(k)
    return Tensor(tensor.name, "BYTES", tuple(out.shape), out)


def _labels(model_dir: Path, filename: str) -> list[str]:
    """The lines of the label file; none when it is missing or lies outside the model's
    folder (a configuration cannot make the server read other files)."""
    folder = os.path.realpath(model_dir)
    path = os.path.realpath(os.path.join(folder, filename))
    if os.path.commonpath([folder, path]) != folder:
        return []
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        return []
    labels = _LABELS.get(key)
    if labels is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            labels = [line.rstrip("\r\n") for line in f]
        if len(_LABELS) >= MAX_LABEL_FILES:
            _LABELS.clear()
        _LABELS[key] = labels
    return labels
