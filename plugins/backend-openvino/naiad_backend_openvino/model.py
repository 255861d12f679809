"""Reading an OpenVINO model, fitting it to its configuration, and compiling it.

As Triton's openvino backend does (``ValidateInputs`` / ``ValidateOutputs``): every
configured tensor must be one of the model's, its element type becomes the config's (OpenVINO
converts), and its dims must agree with the model's, past the batch dimension when the model
batches. ``RESHAPE_IO_LAYERS: YES`` gives the inputs the config's dims instead (-1: any).

Batching differs on purpose: Triton compiles a batching model at ``max_batch_size`` rows and
refuses smaller batches unless ``ENABLE_BATCH_PADDING`` is set; naiad leaves the batch
dimension dynamic, so any batch up to ``max_batch_size`` runs as sent. With
``SKIP_OV_DYNAMIC_BATCHSIZE: YES`` (for a topology that cannot take a dynamic batch) the
batch is compiled at ``max_batch_size``, as in Triton, and ``ENABLE_BATCH_PADDING`` keeps its
meaning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import openvino as ov
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import config_to_datatype
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad_backend_openvino.parameters import OpenVinoParameters
from naiad_backend_openvino.types import DATATYPE_TO_OV

log = logging.getLogger("naiad.backend.openvino")

MODEL_FILENAME = "model.xml"
DEVICE = "CPU"


def read(core: ov.Core, path: Path, model_name: str) -> ov.Model:
    """The model in ``path`` (IR ``.xml`` with its ``.bin``, ONNX, or another format
    OpenVINO reads); a missing or unreadable file fails the load naming it."""
    if not path.exists():
        raise InferenceServerError(f"model '{model_name}': unable to find '{path}'",
                                   Status.UNAVAILABLE)
    try:
        return core.read_model(str(path))
    except RuntimeError as exc:
        raise invalid_arg(f"model '{model_name}': OpenVINO cannot read '{path}': "
                          f"{_reason(exc)}") from None


def configure(model: ov.Model, config: ModelConfig, parameters: OpenVinoParameters,
              model_name: str) -> ov.Model:
    """``model`` with the config's element types, batch dimension and (with
    RESHAPE_IO_LAYERS) shapes; raises INVALID_ARG naming the tensor on a mismatch."""
    batching = config.max_batch_size > 0
    inputs = {port.get_any_name(): port for port in model.inputs}
    outputs = {port.get_any_name(): port for port in model.outputs}
    shapes: dict[str, ov.PartialShape] = {}
    for tensor in config.input:
        port = _port(inputs, tensor.name, "input", model_name)
        dims = _dims(tensor)
        shape = port.get_partial_shape()
        if parameters.reshape_io:
            shape = ov.PartialShape([-1, *dims] if batching else dims)
        else:
            _compare(shape, dims, batching, model_name, tensor.name)
        if batching:
            if shape.rank.is_dynamic or len(shape) == 0:
                raise invalid_arg(f"model '{model_name}', tensor '{tensor.name}': for the "
                                  f"model to support batching the shape should have at least "
                                  f"1 dimension")
            batch = config.max_batch_size if parameters.skip_dynamic_batch else -1
            shape = ov.PartialShape([ov.Dimension(batch), *list(shape)[1:]])
        shapes[tensor.name] = shape
    if shapes:
        try:
            model.reshape({inputs[name]: shape for name, shape in shapes.items()})
        except RuntimeError as exc:
            hint = ("" if parameters.skip_dynamic_batch or not batching else
                    "; a model whose topology cannot take a dynamic batch size needs "
                    "parameter SKIP_OV_DYNAMIC_BATCHSIZE: YES")
            raise invalid_arg(f"model '{model_name}': OpenVINO cannot give the inputs the "
                              f"configured shapes: {_reason(exc)}{hint}") from None
    outputs = {port.get_any_name(): port for port in model.outputs}
    for tensor in config.output:
        port = _port(outputs, tensor.name, "output", model_name)
        _compare(port.get_partial_shape(), _dims(tensor), batching, model_name, tensor.name)
    ppp = ov.preprocess.PrePostProcessor(model)
    for tensor in config.input:
        ppp.input(tensor.name).tensor().set_element_type(_element(tensor, model_name))
    for tensor in config.output:
        ppp.output(tensor.name).tensor().set_element_type(_element(tensor, model_name))
    return ppp.build()


class CompiledModels:
    """One compiled model per model version, shared by its instances (each instance has its
    own infer request on it, as in Triton): compiling once saves the time and memory of a
    compilation per instance. Released when the last instance closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[object, tuple[ov.CompiledModel, int]] = {}

    def acquire(self, key: object, compile_model: Callable[[], ov.CompiledModel]
                ) -> ov.CompiledModel:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = (compile_model(), 0)
            self._entries[key] = (entry[0], entry[1] + 1)
            return entry[0]

    def release(self, key: object) -> None:
        with self._lock:
            compiled, users = self._entries[key]
            if users <= 1:
                del self._entries[key]
            else:
                self._entries[key] = (compiled, users - 1)


def compile_model(core: ov.Core, model: ov.Model, parameters: OpenVinoParameters,
                  model_name: str) -> ov.CompiledModel:
    try:
        return core.compile_model(model, DEVICE, dict(parameters.properties))
    except RuntimeError as exc:
        raise invalid_arg(f"model '{model_name}': OpenVINO cannot compile the model for "
                          f"{DEVICE}: {_reason(exc)}") from None


def precision_of(compiled: ov.CompiledModel) -> str:
    """The precision ``compiled`` computes its floating-point layers in (``f32``, ``bf16``,
    ``f16``): the one asked for, or OpenVINO's default on a CPU that lacks it."""
    try:
        value = compiled.get_property("INFERENCE_PRECISION_HINT")
    except RuntimeError:
        return "unknown"
    return value.get_type_name() if isinstance(value, ov.Type) else str(value)


def _port(ports: dict[str, ov.Output], name: str, kind: str, model_name: str) -> ov.Output:
    if name not in ports:
        raise invalid_arg(f"model '{model_name}': configured {kind} '{name}' is not an {kind} "
                          f"of the model; its {kind}s are {', '.join(sorted(ports))}")
    return ports[name]


def _dims(tensor: object) -> list[int]:
    if tensor.HasField("reshape"):  # type: ignore[attr-defined]
        return list(tensor.reshape.shape)  # type: ignore[attr-defined]
    return list(tensor.dims)  # type: ignore[attr-defined]


def _element(tensor: object, model_name: str) -> ov.Type:
    datatype = config_to_datatype(DataType.Name(tensor.data_type))  # type: ignore[attr-defined]
    element = DATATYPE_TO_OV.get(datatype)
    if element is None:
        raise invalid_arg(f"model '{model_name}': tensor '{tensor.name}' "  # type: ignore[attr-defined]
                          f"has datatype {datatype}, which the openvino backend does not "
                          f"support; use one of {', '.join(DATATYPE_TO_OV)}")
    return element


def _compare(shape: ov.PartialShape, dims: list[int], batching: bool, model_name: str,
             tensor_name: str) -> None:
    """Triton's ``CompareDimsSupported``: the model's rank must be the config's (plus the
    batch dimension), and each size the config fixes must be the model's; a -1 in the
    config, or a dynamic dimension in the model, agrees with any size."""
    if shape.rank.is_dynamic:
        return
    model_dims = list(shape)[1:] if batching else list(shape)
    ok = len(model_dims) == len(dims)
    if ok:
        for dimension, want in zip(model_dims, dims, strict=True):
            if want == -1:
                continue
            if dimension.is_static and dimension.get_length() != want:
                ok = False
    if not ok:
        sizes = [d.get_length() if d.is_static else -1 for d in shape]
        rank = "an initial batch dimension (max_batch_size > 0) and then " if batching else ""
        raise invalid_arg(f"model '{model_name}', tensor '{tensor_name}': the model expects "
                          f"{len(sizes)} dimensions (shape {sizes}) but the model "
                          f"configuration specifies {rank}dims {dims}")


def _reason(exc: BaseException) -> str:
    """The informative line of an OpenVINO exception (they start with source locations)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Exception from ")]
    return (useful or lines or [type(exc).__name__])[0]
