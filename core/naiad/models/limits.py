"""Bounds on the sizes a model configuration makes the server allocate when it loads.

A configuration is read from the repository or sent with a load request, and some of its
numbers turn into threads, processes or memory at once: ``instance_group`` counts (a thread
or a worker process each), ``dynamic_batching.priority_levels`` (a queue each), and the
tensors the server builds from ``dims`` before any request arrives (every ``model_warmup``
sample, each sequence state's initial value). Each has a named setting; a configuration
over one fails its load with INVALID_ARG (HTTP 400) naming the model, the field, the value
and the setting, before any backend code runs, so one bad load costs nothing the next load
would miss.

Sizes that only bound what requests may later bring (``max_batch_size``, ``max_queue_size``,
``max_candidate_sequences``, preferred batch sizes) allocate nothing up front: what a
request carries is bounded by ``--http-max-input-size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.datatypes import NUMPY_DTYPES, config_to_datatype, element_count
from naiad.errors import invalid_arg
from naiad.models.instances import requested_instances

MIB = 1024 * 1024
#: ``--max-instances-per-model``: Triton has no bound; 64 threads or processes is already
#: more than any machine naiad runs on has cores.
DEFAULT_MAX_INSTANCES = 64
#: ``--max-priority-levels``: Triton has no bound; its own examples use 2 to 10 levels.
DEFAULT_MAX_PRIORITY_LEVELS = 1000
#: ``--max-config-tensor-bytes``: one warmup sample's inputs (all its rows) or one sequence
#: state's initial value.
DEFAULT_MAX_CONFIG_TENSOR_BYTES = 256 * MIB
#: What one BYTES element costs before it holds anything (a reference in an object array).
OBJECT_ELEMENT_BYTES = 8


@dataclass(frozen=True)
class ConfigLimits:
    """The bounds, with the flags that set them."""

    #: ``--max-instances-per-model``: instances of one model version, over every group
    max_instances: int = DEFAULT_MAX_INSTANCES
    #: ``--max-priority-levels``: ``dynamic_batching.priority_levels``
    max_priority_levels: int = DEFAULT_MAX_PRIORITY_LEVELS
    #: ``--max-config-tensor-bytes``: bytes of a tensor built from a configuration
    max_tensor_bytes: int = DEFAULT_MAX_CONFIG_TENSOR_BYTES


def check_config_sizes(model: str, config: ModelConfig, limits: ConfigLimits) -> None:
    """Raise INVALID_ARG when ``config`` (defaults filled in) asks for more than
    ``limits`` allow."""
    if config.instance_group:
        requested = requested_instances(config)
        if requested > limits.max_instances:
            raise invalid_arg(
                f"model '{model}': instance_group asks for {requested} instances, more than "
                f"the {limits.max_instances} one model may have (--max-instances-per-model)")
    levels = config.dynamic_batching.priority_levels
    if levels > limits.max_priority_levels:
        raise invalid_arg(
            f"model '{model}': dynamic_batching priority_levels {levels} is more than the "
            f"{limits.max_priority_levels} levels a model may have (--max-priority-levels)")
    rows = config.max_batch_size > 0
    for index, warmup in enumerate(config.model_warmup):
        size = sum(_tensor_bytes(spec.data_type, spec.dims)
                   for spec in warmup.inputs.values()) * max(warmup.batch_size, 1)
        _check_bytes(model, f"model_warmup[{index}] ('{warmup.name}')", size,
                     f"batch_size {max(warmup.batch_size, 1)}" if rows else "", limits)
    for state in config.sequence_batching.state:
        dims = (state.initial_state[0].dims if state.initial_state
                else [d if d >= 0 else 1 for d in state.dims])
        _check_bytes(model, f"sequence_batching state '{state.input_name}' initial value",
                     _tensor_bytes(state.data_type, dims), "", limits)


def _tensor_bytes(data_type: int, dims: list[int]) -> int:
    """Bytes of a tensor of ``dims`` (variable dimensions count as 1: the configuration
    check refuses them where a fixed size is needed)."""
    try:
        dtype = NUMPY_DTYPES.get(config_to_datatype(DataType.Name(data_type)))
    except ValueError:  # a datatype number the schema does not know: refused elsewhere
        dtype = None
    itemsize = dtype.itemsize if dtype is not None else OBJECT_ELEMENT_BYTES
    return element_count([max(int(d), 1) for d in dims]) * itemsize


def _check_bytes(model: str, what: str, size: int, detail: str, limits: ConfigLimits) -> None:
    if size > limits.max_tensor_bytes:
        raise invalid_arg(
            f"model '{model}': {what} dims make {size} bytes{' with ' + detail if detail else ''}"
            f", more than the {limits.max_tensor_bytes} a tensor built from a configuration "
            f"may hold (--max-config-tensor-bytes)")
