"""Filling config.pbtxt from the ONNX graph, as Triton's onnxruntime backend does.

Only what the configuration leaves out is filled: ``max_batch_size`` when it is 0 and every
graph input and output has a variable leading dimension (then the backend's
``default-max-batch-size``, 4 unless ``--backend-config`` says otherwise, plus an empty
``dynamic_batching`` when no scheduler is set and the size is above 1), ``input`` when it
lists nothing and ``output`` when it lists nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import DataType

from naiad.backend_utils import datatype_to_config
from naiad.errors import invalid_arg
from naiad_backend_onnx.model_io import ModelIO, TensorInfo

if TYPE_CHECKING:
    from collections.abc import Iterable

    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.onnxruntime")


def needs_graph(config: ModelConfig) -> bool:
    """Whether auto-complete has anything to do: Triton skips it when the configuration
    already lists inputs (``input`` or ``batch_input``) and outputs."""
    return not ((config.input or config.batch_input) and config.output)


def complete_config(config: ModelConfig, io: ModelIO, default_max_batch_size: int,
                    model_name: str) -> list[str]:
    """Fill ``config`` in place from ``io``; return the top-level fields filled."""
    filled = []
    has_inputs = bool(config.input or config.batch_input)
    if io.can_batch():
        if config.max_batch_size == 0 and default_max_batch_size > 0:
            config.max_batch_size = default_max_batch_size
            filled.append("max_batch_size")
            log.warning("model '%s': max_batch_size set to %d because the ONNX model can batch "
                        "and the configuration gives none; set max_batch_size to choose "
                        "another size", model_name, default_max_batch_size)
        if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
                and not config.HasField("sequence_batching")):
            config.dynamic_batching.SetInParent()
            filled.append("dynamic_batching")
    elif config.max_batch_size != 0:
        raise invalid_arg(
            f"model '{model_name}': auto-complete failed: the ONNX model does not support "
            f"batching (every input and output needs a variable first dimension) but "
            f"max_batch_size is {config.max_batch_size}; set max_batch_size: 0")
    batching = config.max_batch_size > 0
    if not has_inputs:
        _add_tensors(config.input, io.inputs.values(), batching, model_name)
        filled.append("input")
    if not config.output:
        _add_tensors(config.output, io.outputs.values(), batching, model_name)
        filled.append("output")
    return filled


def _add_tensors(target: RepeatedCompositeFieldContainer, infos: Iterable[TensorInfo],
                 batching: bool, model_name: str) -> None:
    for info in infos:
        if info.datatype is None:
            raise invalid_arg(f"model '{model_name}': auto-complete failed: '{info.name}' has "
                              f"ONNX type {info.onnx_type}, which has no Triton datatype")
        tensor = target.add(name=info.name,
                            data_type=DataType.Value(datatype_to_config(info.datatype)))
        dims = list(info.dims[1:] if batching else info.dims)
        if dims:
            tensor.dims.extend(dims)
        else:
            # A scalar is declared as dims [1]; in a batching model it also needs an empty
            # reshape so the backend sees one value per batch item.
            tensor.dims.append(1)
            if batching:
                tensor.reshape.SetInParent()
