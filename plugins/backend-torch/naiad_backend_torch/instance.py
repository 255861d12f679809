"""One loaded PyTorch model on one device, executing batches of requests.

A batch is merged along the batch dimension (``naiad.backend_utils``), handed to torch without
copying, run once under ``torch.inference_mode()`` and split back into one response per
request. If a merged batch fails, each request is run on its own so that one bad request
does not fail the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import batch_sizes, config_to_datatype, merge_inputs, split_outputs
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.types import InferenceRequest, InferenceResponse, InstanceInfo, ModelInstance, Tensor
from naiad_backend_torch.dtypes import TORCH_DTYPES, to_numpy, to_tensor
from naiad_backend_torch.loading import RETURNS_DICT, RETURNS_TENSOR, LoadedModel
from naiad_backend_torch.naming import Convention, InputBinding
from naiad_backend_torch.parameters import TorchSettings
from naiad_backend_torch.threads import ThreadBudget, use_intra_op_threads

# Longest framework message passed on to a client (TorchScript tracebacks run long).
MAX_MESSAGE_CHARS = 2000


class TorchModelInstance(ModelInstance):
    """Executes one model on one device (for KIND_MODEL: where the model's weights are)."""

    def __init__(self, model_name: str, config: ModelConfig, instance: InstanceInfo,
                 loaded: LoadedModel, device: torch.device, inputs: InputBinding,
                 outputs: dict[str, int], settings: TorchSettings,
                 budget: ThreadBudget | None, release: Callable[[], None]) -> None:
        self.model_name = model_name
        self.instance_name = instance.name
        self.loaded = loaded
        self.device = device
        self.settings = settings
        self.batching = config.max_batch_size > 0
        self.input_names = tuple(t.name for t in config.input)
        self.inputs = inputs
        self.output_positions = outputs
        self.output_types = {t.name: config_to_datatype(DataType.Name(t.data_type))
                             for t in config.output}
        self._budget = budget  # None: a GPU instance, or a model with its own thread count
        self._release = release
        self._on_cpu = device.type == "cpu"
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._closed = False

    # --- execution ----------------------------------------------------------------------

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        if self._on_cpu:
            threads = self.settings.intra_op_threads or (self._budget.share() if self._budget
                                                         else None)
            if threads:
                use_intra_op_threads(threads)
        if not self.settings.optimized_execution:
            torch._C._set_graph_executor_optimize(False)  # thread-local in torch
        if len(requests) == 1:
            return self._run_batch(requests)  # a failure is raised: the core counts it
        if self.batching:
            try:
                return self._run_batch(requests)
            except InferenceServerError:
                pass  # run them one by one below, so that only the bad ones fail
        responses = []
        errors: list[InferenceServerError] = []
        for request in requests:
            try:
                responses.extend(self._run_batch([request]))
            except InferenceServerError as error:
                errors.append(error)
                responses.append(InferenceResponse(error=error))
        if len(errors) == len(requests) and len({e.message for e in errors}) == 1:
            raise errors[0]  # the whole batch failed alike: let the core count failures
        return responses

    def _run_batch(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        try:
            arrays = merge_inputs(requests, self.input_names)
        except ValueError as exc:
            raise invalid_arg(f"model '{self.model_name}': {exc}") from None
        result = self._forward(arrays)
        outputs = self._collect(result, arrays)
        sizes = batch_sizes(requests) if self.batching else [1] * len(requests)
        try:
            per_request = split_outputs(outputs, sizes)
        except ValueError as exc:
            raise invalid_arg(f"model '{self.model_name}': {exc}") from None
        return [self._respond(request, values)
                for request, values in zip(requests, per_request, strict=True)]

    def _forward(self, arrays: dict[str, np.ndarray]) -> Any:
        device = self.device
        tensors = {name: to_tensor(array) for name, array in arrays.items()}
        guard = torch.inference_mode() if self.settings.inference_mode else torch.no_grad()
        try:
            # On a GPU, the copies in and the model run on this instance's own stream.
            with guard, self._stream_context():
                if device.type != "cpu":
                    tensors = {name: t.to(device, non_blocking=True)
                               for name, t in tensors.items()}
                result = self.loaded.module(*self._arguments(tensors))
                if self._stream is not None:
                    self._stream.synchronize()
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.model_name}': PyTorch execute failure on inputs "
                f"{_describe_inputs(arrays)}: {_message(exc)}") from None
        finally:
            if self.settings.cache_cleaning and device.type == "cuda":
                torch.cuda.empty_cache()
        return result

    def _arguments(self, tensors: dict[str, torch.Tensor]) -> list[Any]:
        """forward()'s positional arguments (or its one dictionary) from the inputs."""
        if self.inputs.convention is Convention.DICTIONARY:
            return [tensors]
        args: list[Any] = [None] * self.inputs.count
        for name, position in self.inputs.positions.items():
            args[position] = tensors.get(name)
        while args and args[-1] is None:  # optional inputs left out at the end
            args.pop()
        return args

    def _stream_context(self) -> Any:
        if self._stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._stream)

    # --- outputs ------------------------------------------------------------------------

    def _collect(self, result: Any, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every config output as a numpy array, checked against the config's datatype."""
        outputs: dict[str, np.ndarray] = {}
        for name, position in self.output_positions.items():
            value = self._pick(result, name, position)
            if not isinstance(value, torch.Tensor):
                raise self._output_error(
                    f"output '{name}' is a {type(value).__name__}, not a Tensor")
            datatype = self.output_types[name]
            if value.dtype != TORCH_DTYPES.get(datatype):
                raise self._output_error(
                    f"output '{name}' is a {value.dtype} tensor but config.pbtxt declares "
                    f"{datatype}")
            if value.device.type != "cpu":
                value = value.cpu()
            outputs[name] = to_numpy(value)
        return outputs

    def _pick(self, result: Any, name: str, position: int) -> Any:
        if isinstance(result, dict) or self.loaded.returns == RETURNS_DICT:
            if not isinstance(result, dict) or name not in result:
                keys = list(result) if isinstance(result, dict) else type(result).__name__
                raise self._output_error(f"output '{name}' is not among the keys of the "
                                         f"dictionary the model returned: {keys}")
            return result[name]
        if isinstance(result, torch.Tensor) or self.loaded.returns == RETURNS_TENSOR:
            if position != 0:
                raise self._output_error(
                    f"output '{name}' refers to output index {position}, but the model "
                    f"returns a single tensor (index 0)")
            return result
        if not isinstance(result, (tuple, list)) or position >= len(result):
            count = len(result) if isinstance(result, (tuple, list)) else 1
            raise self._output_error(
                f"the output {name} in the model configuration refers to an output index "
                f"which doesn't exist. This model has {count} outputs")
        return result[position]

    def _output_error(self, message: str) -> InferenceServerError:
        return InferenceServerError(f"model '{self.model_name}': {message}", Status.INTERNAL)

    def _respond(self, request: InferenceRequest, values: dict[str, np.ndarray]
                 ) -> InferenceResponse:
        wanted = request.requested_outputs
        names = values if wanted is None else [o.name for o in wanted if o.name in values]
        types = self.output_types
        return InferenceResponse(outputs=[
            Tensor(name, types[name], tuple(values[name].shape), values[name])
            for name in names])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._budget is not None:
            self._budget.leave()
        self._release()


def _describe_inputs(arrays: dict[str, np.ndarray]) -> str:
    return ", ".join(f"'{name}' {list(array.shape)} {array.dtype}"
                     for name, array in arrays.items())


def _message(exc: BaseException) -> str:
    """A framework exception as one readable message: TorchScript errors carry the
    interpreter's traceback before the error itself, so the end is what matters."""
    text = str(exc).strip() or type(exc).__name__
    if len(text) > MAX_MESSAGE_CHARS:
        text = "..." + text[-MAX_MESSAGE_CHARS:]
    return f"{type(exc).__name__}: {text}"
