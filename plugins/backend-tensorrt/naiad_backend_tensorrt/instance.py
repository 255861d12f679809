"""One model instance: an execution context on one GPU, its CUDA stream and device buffers.

A batch runs as: merge the requests' inputs (``naiad.backend_utils``), pick the optimization
profile for the merged shapes, set each input's shape and copy it to the device, size the
outputs from the shapes TensorRT infers, ``execute_async_v3`` on the instance's stream, copy
the outputs back, wait for the stream, and give each request its rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import (
    batch_sizes,
    config_to_datatype,
    format_shape,
    merge_inputs,
    split_outputs,
)
from naiad.errors import InferenceServerError, Status, invalid_arg, unsupported
from naiad.types import InferenceRequest, InferenceResponse, ModelInstance, Tensor
from naiad_backend_tensorrt.autocomplete import engine_dims
from naiad_backend_tensorrt.cuda import Cuda, DeviceBuffer
from naiad_backend_tensorrt.dtypes import numpy_dtype
from naiad_backend_tensorrt.engine import LoadedEngine
from naiad_backend_tensorrt.engine_io import EngineIO
from naiad_backend_tensorrt.profiles import ProfileTable, Shape, select_profile

log = logging.getLogger("naiad.backend.tensorrt")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How a configured output reaches the client: its V2 datatype and, with ``reshape``,
    the configured dims to give the engine's shape."""

    name: str
    datatype: str
    dims: Shape
    reshape: Shape | None


class TensorRTInstance(ModelInstance):
    """Runs batches of requests through one TensorRT execution context."""

    def __init__(self, *, model: str, config: ModelConfig, io: EngineIO, loaded: LoadedEngine,
                 cuda: Cuda, device_id: int, profiles: Sequence[int]) -> None:
        self.model = model
        self.cuda = cuda
        self.device_id = device_id
        self.loaded = loaded
        self.batching = config.max_batch_size > 0
        self.input_names = [t.name for t in io.inputs]
        self.dtypes = {t.name: numpy_dtype(t.dtype, t.name) for t in io.tensors}
        # Every engine output needs an address, configured or not.
        self.engine_outputs = [t.name for t in io.outputs]
        self.outputs = [_output_plan(entry) for entry in config.output]
        self.profiles: ProfileTable = {
            index: {t.name: t.profiles[index] for t in io.inputs} for index in profiles}
        self.buffers = {t.name: DeviceBuffer(cuda) for t in io.tensors}
        self.active_profile: int | None = None
        self.stream: Any = None
        self.context: Any = None
        cuda.set_device(device_id)
        self.stream = cuda.create_stream()
        self.stream_handle = cuda.handle(self.stream)
        self.context = loaded.engine.create_execution_context()
        if self.context is None:
            self.close()
            raise InferenceServerError(
                f"model '{model}': TensorRT could not create an execution context on GPU "
                f"{device_id} ({self._trt_errors()})", Status.UNAVAILABLE)

    # --- execution ----------------------------------------------------------------------

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        if not self.batching and len(requests) > 1:
            # Without a batch dimension each request is its own engine run.
            return [self._respond([request])[0] for request in requests]
        return self._respond(requests)

    def _respond(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        try:
            per_request = self._run(requests)
        except InferenceServerError as exc:
            return [InferenceResponse(error=exc) for _ in requests]
        return [InferenceResponse(outputs=[
            Tensor(plan.name, plan.datatype, tuple(rows[plan.name].shape), rows[plan.name])
            for plan in self.outputs]) for rows in per_request]

    def _run(self, requests: Sequence[InferenceRequest]) -> list[dict[str, np.ndarray]]:
        try:
            arrays = merge_inputs(requests, self.input_names)
        except ValueError as exc:
            raise invalid_arg(f"model '{self.model}': {exc}") from None
        missing = [name for name in self.input_names if name not in arrays]
        if missing:
            raise invalid_arg(f"model '{self.model}': the TensorRT engine needs every input; "
                              f"the request lacks {', '.join(repr(n) for n in missing)}")
        shapes = {name: tuple(array.shape) for name, array in arrays.items()}
        profile = select_profile(self.profiles, shapes, self.model)
        self.cuda.set_device(self.device_id)
        self._activate(profile)
        held: list[np.ndarray] = []
        try:
            results = self._enqueue(arrays, held)
        finally:
            # The queued copies read `held` and write `results` until the stream is done.
            self.cuda.synchronize(self.stream)
        client = {plan.name: self._client_view(plan, results[plan.name]) for plan in self.outputs}
        if not self.batching:
            return [client]
        try:
            return split_outputs(client, batch_sizes(requests))
        except ValueError as exc:
            raise InferenceServerError(f"model '{self.model}': {exc}", Status.INTERNAL) from None

    def _enqueue(self, arrays: dict[str, np.ndarray], held: list[np.ndarray]
                 ) -> dict[str, np.ndarray]:
        """Queue the input copies, the engine run and the output copies on the stream; return
        the host arrays the outputs land in (once the stream is synchronized)."""
        for name, array in arrays.items():
            host = np.ascontiguousarray(array, dtype=self.dtypes[name])
            held.append(host)
            if not self.context.set_input_shape(name, host.shape):
                raise invalid_arg(f"model '{self.model}': TensorRT refused shape "
                                  f"{format_shape(host.shape)} for input '{name}' "
                                  f"({self._trt_errors()})")
            address = self.buffers[name].reserve(host.nbytes)
            self.cuda.copy_to_device(address, host, self.stream)
            self._bind(name, address)
        results = {name: self._prepare_output(name) for name in self.engine_outputs}
        if not self.context.execute_async_v3(self.stream_handle):
            raise InferenceServerError(f"model '{self.model}': TensorRT execution failed "
                                       f"({self._trt_errors()})", Status.INTERNAL)
        for name, host in results.items():
            if host.nbytes:
                self.cuda.copy_to_host(host, self.buffers[name].address, self.stream)
        return results

    def _activate(self, profile: int) -> None:
        if profile == self.active_profile:
            return
        if not self.context.set_optimization_profile_async(profile, self.stream_handle):
            raise InferenceServerError(
                f"model '{self.model}': TensorRT could not switch to optimization profile "
                f"{profile} ({self._trt_errors()})", Status.INTERNAL)
        self.cuda.synchronize(self.stream)  # the switch may queue copies on the stream
        self.active_profile = profile

    def _prepare_output(self, name: str) -> np.ndarray:
        shape = tuple(int(d) for d in self.context.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            raise unsupported(
                f"model '{self.model}': output '{name}' has a data-dependent shape "
                f"{format_shape(shape)} (known only after execution), which naiad's TensorRT "
                f"backend does not support yet")
        host = np.empty(shape, dtype=self.dtypes[name])
        self._bind(name, self.buffers[name].reserve(host.nbytes))
        return host

    def _bind(self, name: str, address: int) -> None:
        if not self.context.set_tensor_address(name, address):
            raise InferenceServerError(
                f"model '{self.model}': TensorRT refused the device address of tensor "
                f"'{name}' ({self._trt_errors()})", Status.INTERNAL)

    def _client_view(self, plan: OutputPlan, array: np.ndarray) -> np.ndarray:
        if plan.reshape is None:
            return array
        target = client_shape(tuple(array.shape), plan.dims, plan.reshape, self.batching)
        try:
            return array.reshape(target)
        except ValueError:
            raise InferenceServerError(
                f"model '{self.model}': output '{plan.name}' of shape "
                f"{format_shape(array.shape)} cannot take the configured dims "
                f"{format_shape(plan.dims)}", Status.INTERNAL) from None

    def _trt_errors(self) -> str:
        errors = getattr(self.loaded.logger, "errors", [])
        return "; ".join(errors[-3:]) if errors else "TensorRT logged no error"

    # --- teardown -----------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.cuda.set_device(self.device_id)
            if self.stream is not None:
                self.cuda.synchronize(self.stream)
            for buffer in self.buffers.values():
                buffer.release()
            if self.stream is not None:
                self.cuda.destroy_stream(self.stream)
        except InferenceServerError as exc:
            log.warning("model '%s': releasing GPU resources failed: %s", self.model, exc.message)
        finally:
            self.stream = None
            # The context goes before the engine, the engine before its runtime.
            self.context = None
            self.loaded.engine = None
            self.loaded.runtime = None


def client_shape(engine_shape: Shape, dims: Shape, reshape: Shape, batching: bool) -> Shape:
    """The shape a client sees for an output the engine produced as ``engine_shape`` when the
    config gives it ``dims`` and ``reshape``: the dims' -1 take the sizes of the engine's
    dynamic dimensions (those where ``reshape`` has -1), in order."""
    batch, body = (engine_shape[:1], engine_shape[1:]) if batching else ((), engine_shape)
    variable = iter(size for want, size in zip(reshape, body, strict=False) if want == -1)
    return batch + tuple(next(variable, -1) if d == -1 else d for d in dims)


def _output_plan(entry: Any) -> OutputPlan:
    return OutputPlan(
        name=entry.name,
        datatype=config_to_datatype(DataType.Name(entry.data_type)),
        dims=tuple(entry.dims),
        reshape=engine_dims(entry) if entry.HasField("reshape") else None,
    )
