"""One instance of an OpenVINO model: an infer request on the model's compiled model.

A batch's inputs are concatenated along the batch dimension
(:func:`naiad.backend_utils.merge_inputs`), run with one asynchronous infer request
(``start_async`` then ``wait``, which releases the GIL while OpenVINO computes, as Triton's
backend runs it) and split back per request. A model compiled at a fixed batch
(``SKIP_OV_DYNAMIC_BATCHSIZE``) takes exactly ``max_batch_size`` rows: smaller batches are
zero-padded with ``ENABLE_BATCH_PADDING: YES`` and refused otherwise, as in Triton.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import openvino as ov
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.backend_utils import (
    NUMPY_DTYPES,
    batch_sizes,
    config_to_datatype,
    merge_inputs,
    split_outputs,
)
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelContext,
    ModelInstance,
    Tensor,
)
from naiad_backend_openvino.parameters import OpenVinoParameters


class OpenVinoModelInstance(ModelInstance):
    """An infer request and the load-time plan for feeding and reading it."""

    def __init__(self, compiled: ov.CompiledModel, context: ModelContext,
                 instance: InstanceInfo, parameters: OpenVinoParameters,
                 release: Callable[[], None]) -> None:
        config = context.config
        self.model_name = context.name
        self.instance_name = instance.name
        self.request = compiled.create_infer_request()
        self.max_batch_size = config.max_batch_size
        self.fixed_batch = config.max_batch_size > 0 and parameters.skip_dynamic_batch
        self.padding = parameters.batch_padding
        self.input_names = tuple(t.name for t in config.input)
        self.input_dtypes = {t.name: NUMPY_DTYPES[config_to_datatype(DataType.Name(
            t.data_type))] for t in config.input}
        self.outputs = {t.name: config_to_datatype(DataType.Name(t.data_type))
                        for t in config.output}
        self._release: Callable[[], None] | None = release

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        feeds = merge_inputs(requests, self.input_names)
        rows = sum(batch_sizes(requests)) if self.max_batch_size > 0 else 0
        padded = self._pad(feeds, rows) if self.fixed_batch else feeds
        # Inputs are copied into the infer request's own tensors and outputs copied out
        # (share_inputs/share_outputs off). Shared input memory (ov.Tensor(...,
        # shared_memory=True)) answered now and then with freed memory's bytes: the request
        # keeps its tensors after the call, and an output may alias an input.
        arrays = [np.ascontiguousarray(array, dtype=self.input_dtypes[name])
                  for name, array in padded.items()]
        try:
            answer = self.request.infer(dict(zip(padded, arrays, strict=True)),
                                        share_inputs=False, share_outputs=False)
        except RuntimeError as exc:
            reason = [line for line in str(exc).splitlines()
                      if line.strip() and not line.startswith("Exception from ")]
            raise InferenceServerError(f"model '{self.model_name}': OpenVINO inference failed: "
                                       f"{(reason or [str(exc)])[0].strip()}",
                                       Status.INVALID_ARG) from None
        by_name = {name: value for port, value in answer.items() for name in port.names}
        results = {name: np.asarray(by_name[name]) for name in self.outputs}
        if self.fixed_batch:
            results = {name: array[:rows] for name, array in results.items()}
        if len(requests) == 1:
            parts = [results]
        else:
            try:
                parts = split_outputs(results, batch_sizes(requests))
            except ValueError as exc:
                raise InferenceServerError(f"model '{self.model_name}': {exc}; a batching "
                                           f"model must give each batch item its own row",
                                           Status.INTERNAL) from None
        return [self._response(request, part) for request, part in
                zip(requests, parts, strict=True)]

    def _pad(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        if rows == self.max_batch_size:
            return feeds
        if not self.padding:
            raise invalid_arg(f"model '{self.model_name}': expected requests with batch size "
                              f"'{self.max_batch_size}', got '{rows}' (the model is compiled "
                              f"at a fixed batch, SKIP_OV_DYNAMIC_BATCHSIZE); this can be "
                              f"avoided by setting parameter 'ENABLE_BATCH_PADDING' to 'YES' "
                              f"at a performance cost")
        return {name: np.concatenate([array, np.zeros(
            (self.max_batch_size - rows, *array.shape[1:]), dtype=array.dtype)])
            for name, array in feeds.items()}

    def _response(self, request: InferenceRequest, results: dict[str, np.ndarray]
                  ) -> InferenceResponse:
        requested = request.requested_outputs
        names = (list(self.outputs) if requested is None
                 else [output.name for output in requested])
        return InferenceResponse(outputs=[
            Tensor(name, self.outputs[name], tuple(results[name].shape), results[name])
            for name in names])

    def close(self) -> None:
        self.request = None  # type: ignore[assignment]
        if self._release is not None:
            self._release()
            self._release = None
