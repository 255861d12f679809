"""The inputs and outputs an ONNX graph declares, and the check that config.pbtxt fits them.

The check follows Triton's onnxruntime backend (``ValidateInputs``, ``ValidateOutputs`` and
``CompareDimsSupported``): every graph input is declared, every declared tensor exists with
the same datatype, and the dims agree, with a leading -1 in the graph for the batch
dimension when ``max_batch_size`` > 0. Messages name the model, the tensor and what differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import DataType

from naiad.backend_utils import config_to_datatype, datatype_to_config
from naiad.errors import invalid_arg
from naiad_backend_onnx.types import datatype_of, dims_of

if TYPE_CHECKING:
    import onnxruntime as ort
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: its ONNX type, V2 datatype (None if Triton has none) and
    full shape (-1 where the size is symbolic or unknown)."""

    name: str
    onnx_type: str
    datatype: str | None
    dims: tuple[int, ...]

    def describe(self) -> str:
        kind = self.datatype or self.onnx_type
        return f"{kind} {list(self.dims)}"


@dataclass(frozen=True)
class ModelIO:
    """What a loaded session says about its graph."""

    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    # Initializers a request may override: Triton accepts them as (optional) inputs.
    initializers: dict[str, TensorInfo]

    @classmethod
    def of(cls, session: ort.InferenceSession) -> ModelIO:
        def infos(args: list[ort.NodeArg]) -> dict[str, TensorInfo]:
            return {arg.name: TensorInfo(arg.name, arg.type, datatype_of(arg.type),
                                         tuple(dims_of(arg.shape))) for arg in args}

        return cls(infos(session.get_inputs()), infos(session.get_outputs()),
                   infos(session.get_overridable_initializers()))

    def can_batch(self) -> bool:
        """True when every input and output has a variable leading dimension (Triton's
        test for a model that supports batching)."""
        return all(info.dims and info.dims[0] == -1
                   for info in (*self.inputs.values(), *self.outputs.values()))


def check_config(config: ModelConfig, io: ModelIO, model_name: str) -> None:
    """Raise an INVALID_ARG error naming the model and tensor when ``config``'s inputs or
    outputs do not fit the graph."""
    where = f"model '{model_name}'"
    declared = {tensor.name for tensor in config.input}
    for name, info in io.inputs.items():
        if name not in declared:
            raise invalid_arg(
                f"{where}: the ONNX model has input '{name}' ({info.describe()}) that the "
                f"configuration does not declare; add it to 'input' (or leave 'input' out "
                f"for naiad to fill it in)")
    for tensor in config.input:
        info = io.inputs.get(tensor.name) or io.initializers.get(tensor.name)
        if info is None:
            raise invalid_arg(
                f"{where}: the configuration declares input '{tensor.name}' but the ONNX "
                f"model has no such input (its inputs are {_names(io.inputs)})")
        if tensor.optional and config.max_batch_size != 0:
            raise invalid_arg(
                f"{where}: optional input '{tensor.name}' is not supported for models that "
                f"batch (max_batch_size > 0)")
        _check_tensor(config, tensor, info, "input", where, exact=False)
    for tensor in config.output:
        info = io.outputs.get(tensor.name)
        if info is None:
            raise invalid_arg(
                f"{where}: the configuration declares output '{tensor.name}' but the ONNX "
                f"model has no such output (its outputs are {_names(io.outputs)})")
        _check_tensor(config, tensor, info, "output", where, exact=True)


def _check_tensor(config: ModelConfig, tensor: ModelInput | ModelOutput, info: TensorInfo,
                  kind: str, where: str, exact: bool) -> None:
    expected = config_to_datatype(DataType.Name(tensor.data_type))
    if info.datatype is None:
        raise invalid_arg(f"{where}: {kind} '{tensor.name}' has ONNX type {info.onnx_type}, "
                          f"which naiad cannot serve (no Triton datatype)")
    if info.datatype != expected:
        raise invalid_arg(
            f"{where}: the configuration expects datatype {datatype_to_config(expected)} for "
            f"{kind} '{tensor.name}', the ONNX model provides "
            f"{datatype_to_config(info.datatype)}")
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    model = list(info.dims)
    if not model:
        # A scalar in the graph is declared as dims [1] (the backend reshapes it).
        if any(d != 1 for d in dims):
            raise invalid_arg(
                f"{where}: {kind} '{tensor.name}' is a scalar in the ONNX model, so the "
                f"configuration may only give dims of 1, got {dims}")
        if config.max_batch_size > 0:
            raise invalid_arg(
                f"{where}: {kind} '{tensor.name}' is a scalar in the ONNX model, which "
                f"cannot have a batch dimension; set max_batch_size: 0")
        return
    batching = config.max_batch_size > 0
    if batching and model[0] != -1:
        raise invalid_arg(
            f"{where}: {kind} '{tensor.name}' has shape {model} in the ONNX model; for the "
            f"model to batch (max_batch_size {config.max_batch_size}) its first dimension "
            f"must be variable (-1), or set max_batch_size: 0")
    full = [-1, *dims] if batching else dims
    fits = len(model) == len(full) and all(
        want == got for want, got in zip(model, full, strict=True) if exact or want != -1)
    if not fits:
        shown = (f"[-1] (the batch dimension, as max_batch_size > 0) followed by dims {dims}"
                 if batching else f"dims {dims}")
        raise invalid_arg(
            f"{where}: {kind} '{tensor.name}' has shape {model} in the ONNX model but the "
            f"configuration gives {shown}")


def _names(infos: dict[str, TensorInfo]) -> str:
    return ", ".join(f"'{name}'" for name in infos) or "none"
