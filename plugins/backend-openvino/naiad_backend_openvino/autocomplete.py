"""Auto-complete as Triton's openvino backend does it (``AutoCompleteConfig`` in
``src/openvino.cc``, Triton 2.51).

- ``max_batch_size``: when every input and output of the model has a layout with a batch
  dimension (``N``) and the config leaves it 0, it becomes ``default-max-batch-size``
  (``--backend-config openvino,default-max-batch-size=N``; Triton's default is 4). A model
  without layouts, the usual case, keeps 0 and its batch dimension stays in the dims.
- ``dynamic_batching {}`` is added when ``max_batch_size`` > 1 and the config has neither a
  dynamic nor a sequence batcher.
- ``input`` / ``output``, when the config has none: each tensor's name, datatype and dims
  (past the batch dimension when the model batches); a shape with any dynamic dimension
  gives -1 for every dimension, as in Triton.
"""

from __future__ import annotations

import openvino as ov
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import datatype_to_config
from naiad.errors import invalid_arg
from naiad_backend_openvino.types import datatype_of, dims_of


def supports_batching(model: ov.Model) -> bool:
    """Whether every input and output carries a layout with a batch dimension."""
    return all(ov.layout_helpers.has_batch(ov.layout_helpers.get_layout(port))
               for port in (*model.inputs, *model.outputs))


def complete_config(config: ModelConfig, model: ov.Model, default_max_batch_size: int,
                    model_name: str) -> list[str]:
    """Fill ``config`` in place; return the top-level fields filled."""
    filled = []
    if supports_batching(model):
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 1)
            filled.append("max_batch_size")
        if config.max_batch_size > 1 and not config.HasField("dynamic_batching") \
                and not config.HasField("sequence_batching"):
            config.dynamic_batching.SetInParent()
            filled.append("dynamic_batching")
    batching = config.max_batch_size > 0
    for field, ports in (("input", model.inputs), ("output", model.outputs)):
        target = getattr(config, field)
        if len(target):
            continue
        for port in ports:
            datatype = datatype_of(port.get_element_type())
            name = port.get_any_name()
            if datatype is None:
                raise invalid_arg(f"model '{model_name}': auto-complete failed: {field} "
                                  f"'{name}' has OpenVINO type {port.get_element_type()}, "
                                  f"which has no datatype in Triton's openvino backend")
            dims = dims_of(port.get_partial_shape())
            target.add(name=name, data_type=DataType.Value(datatype_to_config(datatype)),
                       dims=dims[1:] if batching else dims)
        filled.append(field)
    return filled
