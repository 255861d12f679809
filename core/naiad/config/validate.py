"""The checks Triton makes when it loads a model configuration, with messages that name the
model, the tensor and what was expected.

Run after :func:`naiad.config.defaults.fill_defaults`, as Triton validates the normalised
config. The rules follow tritonserver 2.51 (``ValidateModelConfig``, ``ValidateModelIOConfig``,
``ValidateInstanceGroup`` in triton-inference-server/core ``model_config_utils.cc``) and what
it answered when given bad configs. One deliberate difference: naiad rejects duplicate input
or output names, which Triton 2.51 loads although requests to such a model are ambiguous.
Each ``_..._problem`` function returns what is wrong, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tritonclient.grpc.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelInput,
    ModelInstanceGroup,
    ModelOutput,
    ModelQueuePolicy,
    ModelSequenceBatching,
)

from naiad.config.platforms import ENSEMBLE
from naiad.errors import invalid_arg

WILDCARD_DIM = -1
_TENSORRT = "tensorrt_plan"
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_FALSE_TRUE = ("int32_false_true", "fp32_false_true", "bool_false_true")
_Control = ModelSequenceBatching.Control
_BOOLEAN_CONTROLS = (_Control.CONTROL_SEQUENCE_START, _Control.CONTROL_SEQUENCE_END,
                     _Control.CONTROL_SEQUENCE_READY)


def validate_config(config: ModelConfig, model_name: str) -> None:
    """Raise an INVALID_ARG error naming the model for the first problem in ``config``."""
    checks: tuple[Callable[[ModelConfig], str | None], ...] = (
        _top_level_problem, _version_policy_problem, _tensors_problem, _batch_io_problem,
        _dynamic_batching_problem, _sequence_batching_problem, _ensemble_problem,
        _instance_groups_problem,
    )
    if config.name and config.name != model_name:
        raise invalid_arg(f"model '{model_name}': config.pbtxt names the model '{config.name}' "
                          f"but its folder is '{model_name}'; the name must equal the folder "
                          f"name (or be left out)")
    for check in checks:
        problem = check(config)
        if problem is not None:
            raise invalid_arg(f"model '{model_name}': {problem}")


def _top_level_problem(config: ModelConfig) -> str | None:
    if config.max_batch_size < 0:
        return f"max_batch_size must be >= 0 (0 disables batching), got {config.max_batch_size}"
    if config.response_cache.enable and config.model_transaction_policy.decoupled:
        return "the response cache does not support decoupled models; disable response_cache"
    return None


def _version_policy_problem(config: ModelConfig) -> str | None:
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "latest" and policy.latest.num_versions < 1:
        return f"version_policy latest num_versions must be >= 1, got {policy.latest.num_versions}"
    # Triton ignores listed versions that cannot exist (< 1) but needs one that can.
    if which == "specific" and not any(v >= 1 for v in policy.specific.versions):
        return (f"version_policy specific must list at least one version >= 1, "
                f"got {list(policy.specific.versions)}")
    return None


def _tensors_problem(config: ModelConfig) -> str | None:
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            problem = _tensor_problem(tensor, config)
            if problem is None and tensor.name in seen:
                problem = f"is declared twice; {kind} names must be unique"
            if problem is not None:
                label = f"{kind} '{tensor.name}'" if tensor.name else f"an {kind}"
                return f"{label} {problem}"
            seen.add(tensor.name)
    return None


def _tensor_problem(tensor: ModelInput | ModelOutput, config: ModelConfig) -> str | None:
    """What is wrong with one input or output (Triton's ``ValidateIOShape`` and more)."""
    if not tensor.name:
        return "has no 'name'"
    if tensor.data_type == DataType.TYPE_INVALID:
        return "has no 'data_type' (e.g. data_type: TYPE_FP32)"
    dims = list(tensor.dims)
    if not dims:
        return ("has no 'dims'; give at least one dimension (a scalar in a batching model is "
                "dims: [ 1 ] with reshape: { shape: [ ] })")
    if any(d < 1 and d != WILDCARD_DIM for d in dims):
        return f"dims must each be >= 1 or -1 (any size), got {dims}"
    if tensor.HasField("reshape"):
        problem = _reshape_problem(dims, list(tensor.reshape.shape), config.max_batch_size)
        if problem is not None:
            return problem
    if isinstance(tensor, ModelInput) and len(dims) != 3 and tensor.format in (
            ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW):
        return f"has format {ModelInput.Format.Name(tensor.format)}, which needs 3 dims, got {dims}"
    if tensor.is_shape_tensor and config.platform != _TENSORRT:
        return "sets is_shape_tensor, which only TensorRT models (tensorrt_plan) support"
    if tensor.is_non_linear_format_io and config.platform != _TENSORRT:
        return "sets is_non_linear_format_io, which only TensorRT models (tensorrt_plan) support"
    return None


def _reshape_problem(dims: list[int], shape: list[int], max_batch_size: int) -> str | None:
    if not shape:
        if max_batch_size == 0:
            return ("has an empty reshape (a scalar), which needs max_batch_size > 0; scalar "
                    "tensors are not supported otherwise")
        # An empty reshape (a scalar per batch item) takes dims of exactly one element.
        return None if dims == [1] * len(dims) else (
            f"has an empty reshape, which needs dims of exactly 1 element, got {dims}")
    if any(d < 1 and d != WILDCARD_DIM for d in shape):
        return f"reshape shape must have dimensions >= 1 or -1 (any size), got {shape}"
    if _runs(dims) != _runs(shape):
        return (f"dims {dims} and reshape shape {shape} hold different numbers of elements "
                f"(the runs between -1 dimensions must match)")
    return None


def _runs(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs between -1 dimensions: [2, 4, -1, 6] -> [8, 6]."""
    runs, current = [], 1
    for d in dims:
        if d == WILDCARD_DIM:
            runs.append(current)
            current = 1
        else:
            current *= d
    runs.append(current)
    return runs


def _batch_io_problem(config: ModelConfig) -> str | None:
    inputs = sorted(t.name for t in config.input)
    outputs = sorted(t.name for t in config.output)
    for item in config.batch_input:
        where = f"batch_input {list(item.target_name)}"
        if len(item.source_input) != 1:
            return f"{where} expects 1 source_input, got {len(item.source_input)}"
        if item.data_type not in (DataType.TYPE_INT32, DataType.TYPE_FP32):
            return (f"{where} data_type must be TYPE_INT32 or TYPE_FP32, "
                    f"got {DataType.Name(item.data_type)}")
        if item.source_input[0] not in inputs:
            return f"{where} source_input '{item.source_input[0]}' is not one of inputs {inputs}"
    for item in config.batch_output:
        targets = list(item.target_name)
        where = f"batch_output {targets}"
        if len(item.source_input) != 1:
            return f"{where} expects 1 source_input, got {len(item.source_input)}"
        if item.source_input[0] not in inputs:
            return f"{where} source_input '{item.source_input[0]}' is not one of inputs {inputs}"
        if len(set(targets)) != len(targets):
            return f"{where} names a target_name twice"
        unknown = [t for t in targets if t not in outputs]
        if unknown:
            return f"{where} target_name '{unknown[0]}' is not one of outputs {outputs}"
    return None


def _preferred_problem(config: ModelConfig, where: str, sizes: Sequence[int]) -> str | None:
    for size in sizes:
        if size <= 0:
            return f"{where} preferred_batch_size must be positive, got {size}"
        if size > config.max_batch_size:
            return (f"{where} preferred_batch_size {size} must be <= max_batch_size "
                    f"{config.max_batch_size}")
    return None


def _dynamic_batching_problem(config: ModelConfig) -> str | None:
    # Triton loads dynamic_batching on a model with max_batch_size 0 (each request then runs
    # alone), so that alone is not an error here either.
    if not config.HasField("dynamic_batching"):
        return None
    batching = config.dynamic_batching
    problem = _preferred_problem(config, "dynamic_batching", batching.preferred_batch_size)
    if problem is not None:
        return problem
    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            return (f"dynamic_batching default_priority_level must be in [1, {levels}] "
                    f"(priority_levels), got {batching.default_priority_level}")
        outside = [level for level in batching.priority_queue_policy if not 1 <= level <= levels]
        if outside:
            return (f"dynamic_batching priority_queue_policy level {outside[0]} is outside "
                    f"[1, {levels}] (priority_levels)")
    if batching.preserve_ordering:
        if levels > 1:
            return (f"dynamic_batching preserve_ordering allows one priority level, "
                    f"got priority_levels {levels}")
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(p.default_timeout_microseconds and p.timeout_action == ModelQueuePolicy.DELAY
               for p in policies):
            return ("dynamic_batching preserve_ordering cannot be combined with a queue "
                    "policy whose timeout_action is DELAY")
    return None


def _sequence_batching_problem(config: ModelConfig) -> str | None:
    if not config.HasField("sequence_batching"):
        return None
    sequence = config.sequence_batching
    if config.response_cache.enable:
        return "the response cache does not support sequence batching; disable response_cache"
    problem = _controls_problem(sequence)
    if problem is None and sequence.HasField("oldest"):
        problem = _preferred_problem(config, "sequence_batching oldest",
                                     sequence.oldest.preferred_batch_size)
    if problem is None and sequence.HasField("direct"):
        utilization = sequence.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            problem = (f"sequence_batching direct minimum_slot_utilization must be in "
                       f"[0.0, 1.0], got {utilization:g}")
    return problem


def _controls_problem(sequence: ModelSequenceBatching) -> str | None:
    seen_tensors: set[str] = set()
    seen_kinds: set[int] = set()
    for control_input in sequence.control_input:
        if not control_input.name:
            return "a sequence_batching control_input has no 'name'"
        if control_input.name in seen_tensors:
            return f"sequence_batching control tensor '{control_input.name}' is listed twice"
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            kind = _Control.Kind.Name(control.kind)
            where = f"sequence_batching control tensor '{control_input.name}' ({kind})"
            if control.kind in seen_kinds:
                return f"sequence_batching has more than one {kind} control tensor"
            seen_kinds.add(control.kind)
            given = [name for name in _FALSE_TRUE if len(getattr(control, name))]
            if control.kind in _BOOLEAN_CONTROLS:
                if len(given) != 1:
                    return (f"{where} must give exactly one of int32_false_true, "
                            f"fp32_false_true or bool_false_true, got {given or 'none'}")
                if len(getattr(control, given[0])) != 2:
                    return f"{where} {given[0]} must have exactly 2 entries (false, true)"
            elif control.kind == _Control.CONTROL_SEQUENCE_CORRID:
                if given:
                    return f"{where} must not give {given[0]}; it takes a data_type"
                if DataType.Name(control.data_type) not in _CORRID_TYPES:
                    return (f"{where} data_type must be one of {', '.join(_CORRID_TYPES)}, "
                            f"got {DataType.Name(control.data_type)}")
    return None


def _ensemble_problem(config: ModelConfig) -> str | None:
    scheduling = config.HasField("ensemble_scheduling")
    if scheduling and config.platform != ENSEMBLE:
        return f"ensemble_scheduling needs platform 'ensemble', got '{config.platform}'"
    if config.platform == ENSEMBLE and not scheduling:
        return "platform 'ensemble' needs an ensemble_scheduling section with its steps"
    if not scheduling:
        return None
    if config.instance_group:
        return "an ensemble must not have instance_group (the models of its steps have theirs)"
    if config.HasField("optimization"):
        return "an ensemble must not have optimization"
    if config.model_warmup:
        return "an ensemble must not have model_warmup"
    if not config.ensemble_scheduling.step:
        return "ensemble_scheduling must list at least one step"
    for index, step in enumerate(config.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                return f"ensemble step {index} has no '{field}'"
    return None


def _instance_groups_problem(config: ModelConfig) -> str | None:
    if config.HasField("ensemble_scheduling"):
        return None
    if not config.instance_group:
        return "has no instance_group"
    for group in config.instance_group:
        where = f"instance group '{group.name}'"
        if group.kind not in ModelInstanceGroup.Kind.values():
            return (f"{where} has unknown kind {group.kind}; expected KIND_AUTO, KIND_CPU, "
                    f"KIND_GPU or KIND_MODEL")
        kind = ModelInstanceGroup.Kind.Name(group.kind)
        if kind in ("KIND_CPU", "KIND_MODEL") and group.gpus:
            return (f"{where} has kind {kind} but lists gpus {list(group.gpus)}; use KIND_GPU "
                    f"(or KIND_AUTO) to run on GPUs")
        if kind == "KIND_GPU" and not group.gpus:
            return (f"{where} has kind KIND_GPU but no GPU is available (run it on a GPU "
                    f"machine, or use KIND_CPU where its backend supports that)")
        if kind == "KIND_AUTO":
            return f"{where} still has kind KIND_AUTO (fill_defaults resolves it)"
        if group.count < 1:
            return f"{where} count must be >= 1, got {group.count}"
        if group.profile and config.platform != _TENSORRT:
            return f"{where} sets 'profile', which only TensorRT models (tensorrt_plan) support"
    return None
