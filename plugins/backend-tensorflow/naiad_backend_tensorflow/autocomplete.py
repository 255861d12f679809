"""Auto-complete as Triton's tensorflow backend does it (``AutoCompleteHelper`` in
``src/tensorflow.cc``, Triton 2.51), for SavedModels (a GraphDef names no inputs or outputs,
so it is never completed).

- The signature supports batching when every tensor of rank > 0 starts with -1. A config
  that sets ``max_batch_size`` > 0 for a signature that does not is an error.
- Whether to batch: the configured tensors hint it (a tensor configured with one dimension
  fewer than the model's says yes, with as many says no; contradicting hints are an error);
  with no tensors configured, the signature decides. ``max_batch_size`` 0 then becomes
  ``default-max-batch-size`` (4 unless ``--backend-config tensorflow,default-max-batch-size``).
- ``dynamic_batching {}`` is added when ``max_batch_size`` > 1 and no batcher is configured.
- Each signature tensor missing from the config is added (name, datatype, dims past the batch
  dimension); a configured one gets a missing datatype or dims filled. A tensor left with no
  dims becomes ``dims: [ 1 ]`` with an empty ``reshape``.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import datatype_to_config
from naiad.errors import invalid_arg
from naiad_backend_tensorflow.model import LoadedModel, TensorInfo


def signature_supports_batch(model: LoadedModel) -> bool:
    return all(not info.dims or info.dims[0] == -1
               for info in (*model.inputs.values(), *model.outputs.values()))


def batch_hint(config: ModelConfig, model: LoadedModel, model_name: str) -> bool:
    if not len(config.input) and not len(config.output):
        return True
    hint = False
    explicit: bool | None = None
    for tensors, offered in ((config.input, model.inputs), (config.output, model.outputs)):
        for tensor in tensors:
            if tensors is config.input and tensor.allow_ragged_batch:
                return True
            info = offered.get(tensor.name)
            if info is None:
                continue
            dims = list(tensor.reshape.shape) if tensor.HasField("reshape") \
                else list(tensor.dims)
            rank = len(info.dims or ())
            if rank > 0 and not dims and explicit is None:
                hint = True
            elif rank > 0 and dims:
                says = len(dims) == rank - 1
                if explicit is not None and explicit != says:
                    raise invalid_arg(f"unable to autofill for '{model_name}', model tensor "
                                      f"configurations are contradicting each other in terms "
                                      f"of whether batching is supported")
                explicit = says
                hint = says
    return hint


def complete_config(config: ModelConfig, model: LoadedModel, default_max_batch_size: int,
                    model_name: str) -> list[str]:
    """Fill ``config`` in place; return the top-level fields filled."""
    filled = []
    supports = signature_supports_batch(model)
    if not supports and config.max_batch_size > 0:
        raise invalid_arg(f"unable to autofill for '{model_name}', configuration specified "
                          f"max-batch {config.max_batch_size} but model signature does not "
                          f"support batching")
    batching = supports and batch_hint(config, model, model_name) \
        and default_max_batch_size > 0
    if config.max_batch_size == 0 and batching:
        config.max_batch_size = default_max_batch_size
        filled.append("max_batch_size")
    if config.max_batch_size > 1 and not config.HasField("dynamic_batching") \
            and not config.HasField("sequence_batching"):
        config.dynamic_batching.SetInParent()
        filled.append("dynamic_batching")
    for field, offered in (("input", model.inputs), ("output", model.outputs)):
        target = getattr(config, field)
        configured = {t.name: t for t in target}
        skipped = set()
        if field == "input":
            skipped = {name for b in config.batch_input for name in b.target_name}
            skipped |= {c.name for c in config.sequence_batching.control_input}
        changed = False
        for name in sorted(offered):
            info = offered[name]
            tensor = configured.get(name)
            if tensor is None:
                if name in skipped:
                    continue
                tensor = target.add(name=name)
            changed |= _fill(tensor, info, batching, model_name)
        if changed:
            filled.append(field)
    return filled


def _fill(tensor: object, info: TensorInfo, batching: bool, model_name: str) -> bool:
    changed = False
    if tensor.data_type == DataType.TYPE_INVALID:  # type: ignore[attr-defined]
        if info.datatype is None:
            raise invalid_arg(f"unable to autofill for '{model_name}': tensor "
                              f"'{tensor.name}' has TensorFlow type "  # type: ignore[attr-defined]
                              f"{info.tf_type}, which has no Triton datatype")
        tensor.data_type = DataType.Value(  # type: ignore[attr-defined]
            datatype_to_config(info.datatype))
        changed = True
    if not len(tensor.dims):  # type: ignore[attr-defined]
        if not info.dims:
            raise invalid_arg(f"Unable to autofill for '{model_name}': the rank of model "
                              f"tensor '{tensor.name}' is 0 and "  # type: ignore[attr-defined]
                              f"dimensions are not defined")
        dims = list(info.dims[1:] if batching else info.dims)
        if dims:
            tensor.dims.extend(dims)  # type: ignore[attr-defined]
        else:
            tensor.dims.append(1)  # type: ignore[attr-defined]
            tensor.reshape.SetInParent()  # type: ignore[attr-defined]
        changed = True
    return changed
