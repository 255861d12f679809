"""The configuration checked against the loaded model, as Triton's tensorflow backend checks
it (``ValidateModelConfig``): every configured tensor must be one the model offers, with the
model's datatype and compatible dims (a batching model's tensors must start with a
dimension of any size, -1, which is the batch)."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import config_to_datatype
from naiad.errors import invalid_arg
from naiad_backend_tensorflow.model import LoadedModel, TensorInfo


def check_config(config: ModelConfig, model: LoadedModel, model_name: str) -> None:
    batching = config.max_batch_size > 0
    if model.graphdef and (not len(config.input) or not len(config.output)):
        placeholders = ", ".join(sorted(model.inputs)[:20]) or "none"
        raise invalid_arg(f"model '{model_name}': a GraphDef names no inputs or outputs, so "
                          f"config.pbtxt must list them (inputs are Placeholders: "
                          f"{placeholders}; outputs are node names)")
    for kind, tensors, offered in (("input", config.input, model.inputs),
                                   ("output", config.output, model.outputs)):
        for tensor in tensors:
            info = offered.get(tensor.name)
            if info is None:
                what = ("Placeholder" if kind == "input" else "node") if model.graphdef \
                    else f"signature {kind}"
                names = ", ".join(sorted(offered)[:20]) or "none"
                raise invalid_arg(f"model '{model_name}': configured {kind} '{tensor.name}' "
                                  f"is not a {what} of the model; it has {names}")
            datatype = config_to_datatype(DataType.Name(tensor.data_type))
            if info.datatype is not None and datatype != info.datatype:
                raise invalid_arg(f"model '{model_name}': {kind} '{tensor.name}' has datatype "
                                  f"{datatype} in the configuration but {info.datatype} "
                                  f"({info.tf_type}) in the model")
            if info.datatype is None:
                raise invalid_arg(f"model '{model_name}': {kind} '{tensor.name}' has "
                                  f"TensorFlow type {info.tf_type}, which has no Triton "
                                  f"datatype")
            dims = (list(tensor.reshape.shape) if tensor.HasField("reshape")
                    else list(tensor.dims))
            _compare(info, dims, batching, model_name, tensor.name)


def _compare(info: TensorInfo, dims: list[int], batching: bool, model_name: str,
             tensor_name: str) -> None:
    if info.dims is None:
        return  # unknown rank: any shape
    model_dims = list(info.dims)
    if batching:
        if not model_dims or model_dims[0] != -1:
            raise invalid_arg(f"model '{model_name}', tensor '{tensor_name}': for the model to "
                              f"support batching the shape should have at least 1 dimension "
                              f"and the first dimension must be -1; but shape expected by "
                              f"the model is {model_dims}")
        model_dims = model_dims[1:]
    ok = len(model_dims) == len(dims) and all(
        m == -1 or d == -1 or m == d for m, d in zip(model_dims, dims, strict=True))
    if not ok:
        prefix = "[-1] + " if batching else ""
        raise invalid_arg(f"model '{model_name}', tensor '{tensor_name}': the model expects "
                          f"shape {list(info.dims)} but the model configuration specifies "
                          f"{prefix}dims {dims}")
