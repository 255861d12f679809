"""One loaded ONNX Runtime session serving batches of requests.

A batch is merged along the batch dimension (:func:`naiad.backend_utils.merge_inputs`), run
once, and split back (:func:`naiad.backend_utils.split_outputs`). When a merged batch fails,
each of its requests is run alone, so one bad request (text that is not UTF-8, values the
graph rejects) fails only itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.backend_utils import batch_sizes, config_to_datatype, merge_inputs, split_outputs
from naiad.errors import InferenceServerError, Status, invalid_arg, unsupported
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelContext,
    ModelInstance,
    Tensor,
)
from naiad_backend_onnx.model_io import ModelIO
from naiad_backend_onnx.settings import SessionSettings
from naiad_backend_onnx.types import (
    NotUtf8Error,
    bf16_to_ortvalue,
    bytes_to_strings,
    ortvalue_to_numpy,
    strings_to_bytes,
)

log = logging.getLogger("naiad.backend.onnxruntime")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How one configured output leaves the session."""

    datatype: str
    # The config's dims when the graph's shape differs from them (a scalar declared as
    # dims [1], or a ``reshape``): the array is reshaped to them, batch dimension first.
    dims: tuple[int, ...] | None


class OnnxModelInstance(ModelInstance):
    """An ONNX Runtime session and the load-time plan for feeding it and reading it."""

    def __init__(self, session: ort.InferenceSession, context: ModelContext,
                 instance: InstanceInfo, io: ModelIO, settings: SessionSettings,
                 release: Callable[[], None] | None = None) -> None:
        config = context.config
        self.session = session
        self.model_name = context.name
        self.instance_name = instance.name
        self.batching = config.max_batch_size > 0
        self._release = release
        datatypes = {t.name: config_to_datatype(DataType.Name(t.data_type))
                     for t in (*config.input, *config.output)}
        self.input_names = tuple(t.name for t in config.input)
        self.bytes_inputs = frozenset(n for n in self.input_names if datatypes[n] == "BYTES")
        self.bf16_inputs = frozenset(n for n in self.input_names if datatypes[n] == "BF16")
        graph_inputs = {**io.initializers, **io.inputs}
        self.scalar_inputs = frozenset(n for n in self.input_names if not graph_inputs[n].dims)
        self.outputs: dict[str, OutputPlan] = {}
        for tensor in config.output:
            reshaped = tensor.HasField("reshape") or not io.outputs[tensor.name].dims
            self.outputs[tensor.name] = OutputPlan(
                datatypes[tensor.name], tuple(tensor.dims) if reshaped else None)
        self.all_outputs = tuple(self.outputs)
        # ONNX Runtime returns BF16 only as OrtValues, which cannot hold strings.
        self.ort_value_outputs = any(p.datatype == "BF16" for p in self.outputs.values())
        if self.ort_value_outputs and self.bytes_inputs:
            raise unsupported(f"model '{self.model_name}': a model with BF16 outputs and "
                              f"string (BYTES) inputs is not supported by the onnxruntime "
                              f"backend")
        # ONNX Runtime keeps no state per calling thread on the CPU; a GPU provider sets
        # its device on the thread that runs, so such a session stays on its own thread.
        self.any_thread = session.get_providers() == ["CPUExecutionProvider"]
        self.run_options = ort.RunOptions()
        for key, value in settings.run_config.items():
            self.run_options.add_run_config_entry(key, value)

    # --- execution ----------------------------------------------------------------------

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        if len(requests) == 1:
            return self._run(requests)  # its failure fails the (one-request) batch
        if self.batching:
            try:
                return self._run(requests)
            except (InferenceServerError, ValueError) as exc:
                log.info("model '%s': a batch of %d requests failed (%s); running them one "
                         "by one", self.model_name, len(requests), exc)
        responses = [self._run_alone(request) for request in requests]
        first_error = responses[0].error
        if first_error is not None and all(r.error is not None for r in responses):
            raise first_error
        return responses

    def close(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None
        self.session = None  # type: ignore[assignment]

    def _run_alone(self, request: InferenceRequest) -> InferenceResponse:
        try:
            return self._run([request])[0]
        except InferenceServerError as exc:
            return InferenceResponse(error=exc)

    def _run(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        feeds = {name: self._feed(name, array)
                 for name, array in merge_inputs(requests, self.input_names).items()}
        wanted = self._wanted(requests)
        results = dict(zip(wanted, self._session_run(wanted, feeds), strict=True))
        sizes = batch_sizes(requests)
        if len(requests) == 1:
            return [self._response(requests[0], results, sizes[0])]
        try:
            parts = split_outputs(results, sizes)
        except ValueError as exc:
            raise InferenceServerError(f"model '{self.model_name}': {exc}; an ONNX model that "
                                       f"batches must give each batch item its own row",
                                       Status.INTERNAL) from None
        return [self._response(request, part, size)
                for request, part, size in zip(requests, parts, sizes, strict=True)]

    def _feed(self, name: str, array: np.ndarray) -> np.ndarray | ort.OrtValue:
        """A merged input as ONNX Runtime takes it."""
        if name in self.bytes_inputs:
            try:
                array = bytes_to_strings(array)
            except NotUtf8Error as exc:
                raise invalid_arg(
                    f"input '{name}' of model '{self.model_name}': {exc}; ONNX string "
                    f"tensors hold UTF-8 text") from None
        if name in self.scalar_inputs:
            array = array.reshape(())
        if name in self.bf16_inputs:
            return bf16_to_ortvalue(array)
        if self.ort_value_outputs:
            return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
        return array

    def _wanted(self, requests: Sequence[InferenceRequest]) -> list[str]:
        """The outputs any request of the batch asked for (all of them when one named
        none), in the configuration's order; ONNX Runtime computes only these."""
        names: set[str] = set()
        for request in requests:
            if request.requested_outputs is None:
                return list(self.all_outputs)
            names.update(output.name for output in request.requested_outputs)
        return [name for name in self.all_outputs if name in names]

    def _session_run(self, wanted: list[str], feeds: dict[str, object]) -> list[np.ndarray]:
        try:
            if self.ort_value_outputs:
                values = self.session.run_with_ort_values(wanted, feeds, self.run_options)
                return [ortvalue_to_numpy(value) for value in values]
            return self.session.run(wanted, feeds, self.run_options)
        except Exception as exc:  # onnxruntime's exception types
            status = (Status.INVALID_ARG if isinstance(exc, ort_errors.InvalidArgument)
                      else Status.INTERNAL)
            raise InferenceServerError(
                f"model '{self.model_name}' instance '{self.instance_name}': onnxruntime "
                f"failed to run the model: {exc}", status) from None

    def _response(self, request: InferenceRequest, results: dict[str, np.ndarray],
                  rows: int) -> InferenceResponse:
        requested = request.requested_outputs
        names = (self.all_outputs if requested is None
                 else [output.name for output in requested])
        outputs = []
        for name in names:
            array = results[name]
            plan = self.outputs[name]
            if plan.datatype == "BYTES":
                array = strings_to_bytes(array)
            if plan.dims is not None:
                array = _reshape(array, (rows, *plan.dims) if self.batching else plan.dims)
            outputs.append(Tensor(name, plan.datatype, tuple(array.shape), array))
        return InferenceResponse(outputs=outputs)


def _reshape(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` in the configured shape, when that shape leaves at most one size open."""
    if shape.count(-1) > 1:
        return array
    try:
        return array.reshape(shape)
    except ValueError:
        return array
