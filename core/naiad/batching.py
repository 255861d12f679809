"""Merging a batch of requests along the batch dimension, and splitting results back.

A scheduler hands a backend a list of requests. Frameworks that run one tensor per input
(ONNX Runtime, PyTorch, TensorRT) merge them with :func:`merge_inputs` and give each request
its own rows of every output with :func:`split_outputs`. The dynamic batcher only ever puts
requests whose inputs agree on every dimension but the first into one batch, so the merge is
a plain concatenation; a lone request is passed through without a copy, and the split hands
out views, not copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from naiad.types import InferenceRequest


def batch_sizes(requests: Sequence[InferenceRequest]) -> list[int]:
    """Each request's leading dimension (the rows it contributes to a merged batch)."""
    sizes = []
    for request in requests:
        size = 1
        for tensor in request.inputs.values():
            size = tensor.shape[0] if tensor.shape else 1
            break
        sizes.append(size)
    return sizes


def shape_key(request: InferenceRequest) -> tuple:
    """What must be equal for two requests to share a batch: the set of inputs present and
    every input's shape past the batch dimension (what :func:`merge_inputs` concatenates)."""
    return tuple(sorted((name, tensor.shape[1:]) for name, tensor in request.inputs.items()))


def merge_inputs(requests: Sequence[InferenceRequest], names: Iterable[str]
                 ) -> dict[str, np.ndarray]:
    """One array per input name: the requests' arrays concatenated along axis 0.

    An input a request lacks (an optional input) is left out of the result when no request
    has it; a batch where only some requests carry it cannot be merged and raises
    ``ValueError`` (the batcher keeps such requests apart).
    """
    if len(requests) == 1:
        inputs = requests[0].inputs
        return {name: inputs[name].data for name in names if name in inputs}
    merged: dict[str, np.ndarray] = {}
    for name in names:
        parts = [request.inputs.get(name) for request in requests]
        present = [part for part in parts if part is not None]
        if not present:
            continue
        if len(present) != len(parts):
            raise ValueError(f"input '{name}' is present in only some requests of the batch")
        merged[name] = np.concatenate([part.data for part in present], axis=0)
    return merged


def split_outputs(outputs: dict[str, np.ndarray], sizes: Sequence[int]
                  ) -> list[dict[str, np.ndarray]]:
    """Give each request its rows of every output, as views (``sizes`` from
    :func:`batch_sizes`). An output whose leading dimension does not add up to the batch is
    a backend bug and raises ``ValueError``."""
    if len(sizes) == 1:
        return [outputs]
    total = sum(sizes)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise ValueError(f"output '{name}' has shape {list(array.shape)}; a batch of "
                             f"{total} needs {total} rows")
    per_request: list[dict[str, np.ndarray]] = []
    start = 0
    for size in sizes:
        end = start + size
        per_request.append({name: array[start:end] for name, array in outputs.items()})
        start = end
    return per_request
