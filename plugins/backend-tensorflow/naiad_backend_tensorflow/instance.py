"""One instance of a TensorFlow model: ``Session.run`` on a batch of requests.

A batch's inputs are concatenated along the batch dimension
(:func:`naiad.backend_utils.merge_inputs`), run once and split back per request. BYTES
tensors travel as TensorFlow strings (numpy object arrays of ``bytes``), both ways.
``Session.run`` releases the GIL while TensorFlow computes; a session shared by several
instances (``MAX_SESSION_SHARE_COUNT``) runs their batches concurrently, as TensorFlow allows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.backend_utils import (
    NUMPY_DTYPES,
    batch_sizes,
    config_to_datatype,
    merge_inputs,
    split_outputs,
)
from naiad.errors import InferenceServerError, Status
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelContext,
    ModelInstance,
    Tensor,
)
from naiad_backend_tensorflow.model import LoadedModel


class TensorFlowModelInstance(ModelInstance):
    """A session and the tensor names to feed and fetch."""

    def __init__(self, model: LoadedModel, context: ModelContext, instance: InstanceInfo,
                 release: Callable[[], None]) -> None:
        config = context.config
        self.model = model
        self.model_name = context.name
        self.instance_name = instance.name
        self.feeds = {t.name: model.inputs[t.name].tensor_name for t in config.input}
        self.input_dtypes = {t.name: NUMPY_DTYPES[config_to_datatype(DataType.Name(
            t.data_type))] for t in config.input}
        self.outputs = {t.name: config_to_datatype(DataType.Name(t.data_type))
                        for t in config.output}
        self.reshapes = {t.name: tuple(t.dims) for t in (*config.input, *config.output)
                         if t.HasField("reshape")}
        self.fetches = {name: model.outputs[name].tensor_name for name in self.outputs}
        self.batching = config.max_batch_size > 0
        self._release: Callable[[], None] | None = release

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        merged = merge_inputs(requests, tuple(self.feeds))
        feed_dict = {}
        for name, array in merged.items():
            dtype = self.input_dtypes[name]
            feed_dict[self.feeds[name]] = array if dtype is None else array.astype(
                dtype, copy=False)
        wanted = self._wanted(requests)
        try:
            values = self.model.session.run([self.fetches[n] for n in wanted], feed_dict)
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            raise InferenceServerError(f"model '{self.model_name}': TensorFlow could not run "
                                       f"the batch: {message.strip().splitlines()[0]}",
                                       Status.INVALID_ARG) from None
        results = dict(zip(wanted, (np.asarray(v) for v in values), strict=True))
        sizes = batch_sizes(requests)
        if len(requests) == 1:
            parts = [results]
        else:
            try:
                parts = split_outputs(results, sizes)
            except ValueError as exc:
                raise InferenceServerError(f"model '{self.model_name}': {exc}; a batching "
                                           f"model must give each batch item its own row",
                                           Status.INTERNAL) from None
        return [self._response(request, part, size)
                for request, part, size in zip(requests, parts, sizes, strict=True)]

    def _wanted(self, requests: Sequence[InferenceRequest]) -> list[str]:
        names: set[str] = set()
        for request in requests:
            if request.requested_outputs is None:
                return list(self.outputs)
            names.update(output.name for output in request.requested_outputs)
        return [name for name in self.outputs if name in names]

    def _response(self, request: InferenceRequest, results: dict[str, np.ndarray],
                  rows: int) -> InferenceResponse:
        requested = request.requested_outputs
        names = (list(results) if requested is None
                 else [output.name for output in requested])
        outputs = []
        for name in names:
            array = results[name]
            if name in self.reshapes:  # a scalar (or reshaped) output: the config's dims
                dims = self.reshapes[name]
                array = array.reshape((rows, *dims) if self.batching else dims)
            outputs.append(Tensor(name, self.outputs[name], tuple(array.shape), array))
        return InferenceResponse(outputs=outputs)

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        if self._release is not None:
            self._release()
            self._release = None
