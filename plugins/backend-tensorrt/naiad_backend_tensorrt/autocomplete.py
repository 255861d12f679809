"""Filling a model's config from its engine's inputs and outputs, and checking the two agree.

Both work on an :class:`EngineIO` (plain data), never on a live engine. The rules are
Triton's TensorRT backend's:

- An engine can batch when every I/O tensor's leading dimension is dynamic (-1). Its largest
  batch is, for each optimization profile the instance groups use (profile 0 by default), the
  smallest leading ``max`` among the inputs; the largest of those over the profiles.
- Configured ``dims`` one shorter than the engine's tensor mean "batching"; dims as long as
  the engine's tensor mean "no batching" (``max_batch_size`` becomes 0).
- ``max_batch_size: 0`` (or unset) takes the engine's largest batch; a larger configured one
  is an error. A model that batches more than 1 gets ``dynamic_batching {}`` unless it
  has a batcher.
- Missing inputs/outputs are added; listed ones without ``data_type`` or ``dims`` get them.
  Dims are the engine's shape past the batch dimension; a per-item scalar becomes
  ``dims: [1]`` with ``reshape: { shape: [] }``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.backend_utils import format_shape
from naiad.errors import invalid_arg, unsupported
from naiad_backend_tensorrt.dtypes import config_type
from naiad_backend_tensorrt.engine_io import EngineIO, TensorIO
from naiad_backend_tensorrt.profiles import Shape, batch_limit, configured_profiles


def complete_config(config: ModelConfig, io: EngineIO, model: str) -> list[str]:
    """Fill what ``config`` leaves out from the engine, in place; return the names of the
    top-level fields filled. Raises an error naming the model when the two disagree."""
    refuse_unsupported(io, model)
    _check_names(config, io, model)
    limit = engine_max_batch_size(io, configured_profiles(config.instance_group,
                                                          io.num_profiles, model))
    hint = _batch_hint(config, io, model)
    if hint and limit == 0:
        raise invalid_arg(
            f"model '{model}': the configured dims leave out the batch dimension, but the "
            f"TensorRT engine cannot batch (a batching engine has a dynamic (-1) leading "
            f"dimension on every input and output); give the engine's full shapes as dims "
            f"and max_batch_size: 0")
    if hint is False:
        limit = 0  # the dims spell out the engine's full shapes: no implicit batch dimension
    filled = []
    if config.max_batch_size == 0:
        if limit > 0:
            config.max_batch_size = limit
            filled.append("max_batch_size")
    elif config.max_batch_size > limit:
        raise _batch_too_large(config, limit, model)
    if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
            and not config.HasField("sequence_batching")):
        config.dynamic_batching.SetInParent()
        filled.append("dynamic_batching")
    batching = config.max_batch_size > 0
    if _fill_tensors(config.input, io.inputs, batching):
        filled.append("input")
    if _fill_tensors(config.output, io.outputs, batching):
        filled.append("output")
    check_config(config, io, model)
    return filled


def check_config(config: ModelConfig, io: EngineIO, model: str) -> None:
    """Raise an error naming the model and tensor unless ``config``'s inputs, outputs and
    ``max_batch_size`` fit the engine (every engine input must be configured; outputs may be
    a subset)."""
    refuse_unsupported(io, model)
    _check_names(config, io, model)
    configured = {entry.name for entry in config.input}
    missing = [t.name for t in io.inputs if t.name not in configured]
    if missing:
        raise invalid_arg(f"model '{model}': the TensorRT engine needs input(s) "
                          f"{_names(missing)}, which the configuration does not list")
    batching = config.max_batch_size > 0
    for kind, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            tensor = io.get(entry.name)
            assert tensor is not None  # _check_names saw to it
            what = f"model '{model}': {kind} '{entry.name}'"
            expected = config_type(tensor.dtype, what)
            if DataType.Name(entry.data_type) != expected:
                raise invalid_arg(
                    f"{what} has data_type {DataType.Name(entry.data_type)} in the "
                    f"configuration, but the TensorRT engine's tensor is {tensor.dtype}, "
                    f"which is {expected}")
            shape = ((-1,) if batching else ()) + engine_dims(entry)
            if not _fits(shape, tensor.shape):
                source = "reshape" if entry.HasField("reshape") else "dims"
                if batching:
                    source = f"the batch dimension -1 and {source}"
                raise invalid_arg(
                    f"{what}: the configuration gives the engine the shape "
                    f"{format_shape(shape)} ({source}), but the TensorRT engine's tensor has "
                    f"shape {format_shape(tensor.shape)}")
    if batching:
        limit = engine_max_batch_size(io, configured_profiles(config.instance_group,
                                                              io.num_profiles, model))
        if config.max_batch_size > limit:
            raise _batch_too_large(config, limit, model)


def engine_max_batch_size(io: EngineIO, profiles: Sequence[int]) -> int:
    """The largest batch the engine runs under ``profiles``; 0 when it cannot batch."""
    if not io.inputs or any(not t.shape or t.shape[0] != -1 for t in io.tensors):
        return 0
    return max(batch_limit(t.profiles[p] for t in io.inputs) for p in profiles)


def refuse_unsupported(io: EngineIO, model: str) -> None:
    """Raise UNSUPPORTED for I/O tensors this backend cannot feed or read."""
    for tensor in io.tensors:
        what = f"model '{model}': {'input' if tensor.is_input else 'output'} '{tensor.name}'"
        if tensor.is_shape_tensor:
            raise unsupported(f"{what} is a shape tensor (its values drive TensorRT's shape "
                              f"inference), which naiad's TensorRT backend does not support")
        if tensor.layout != "LINEAR":
            raise unsupported(f"{what} uses the I/O format {tensor.layout}; rebuild the engine "
                              f"with the LINEAR (row-major) format for its inputs and outputs")
        config_type(tensor.dtype, what)


def engine_dims(entry: Any) -> Shape:
    """What a configured input or output looks like to the engine, past the batch
    dimension: its ``reshape`` shape if it has one, else its ``dims``."""
    return tuple(entry.reshape.shape) if entry.HasField("reshape") else tuple(entry.dims)


def _check_names(config: ModelConfig, io: EngineIO, model: str) -> None:
    for kind, entries, tensors in (("input", config.input, io.inputs),
                                   ("output", config.output, io.outputs)):
        names = [t.name for t in tensors]
        for entry in entries:
            if entry.name not in names:
                raise invalid_arg(
                    f"model '{model}': configuration {kind} '{entry.name}' is not an {kind} of "
                    f"the TensorRT engine, whose {kind}s are {_names(names) or 'none'}")


def _batch_hint(config: ModelConfig, io: EngineIO, model: str) -> bool | None:
    """True when configured dims leave out a batch dimension, False when they spell out the
    engine's full shapes, None when no tensor has dims."""
    hint: bool | None = None
    for entry in (*config.input, *config.output):
        dims = engine_dims(entry)
        if not dims:
            continue
        tensor = io.get(entry.name)
        assert tensor is not None
        batched = len(tensor.shape) == len(dims) + 1
        if hint is not None and hint != batched:
            raise invalid_arg(
                f"model '{model}': the configured dims disagree on batching: some leave out "
                f"the engine's batch dimension and others ('{entry.name}' {format_shape(dims)} "
                f"for engine shape {format_shape(tensor.shape)}) do not")
        hint = batched
    return hint


def _fill_tensors(entries: Any, tensors: list[TensorIO], batching: bool) -> bool:
    """Add the engine's tensors to an empty ``config.input``/``output``, or fill the
    ``data_type`` and ``dims`` the listed ones leave out; True if anything changed."""
    if not len(entries):
        for tensor in tensors:
            entry = entries.add(name=tensor.name)
            _fill_entry(entry, tensor, batching)
        return bool(tensors)
    changed = False
    by_name = {t.name: t for t in tensors}
    for entry in entries:
        tensor = by_name[entry.name]
        if entry.data_type == DataType.TYPE_INVALID or not entry.dims:
            _fill_entry(entry, tensor, batching)
            changed = True
    return changed


def _fill_entry(entry: Any, tensor: TensorIO, batching: bool) -> None:
    if entry.data_type == DataType.TYPE_INVALID:
        entry.data_type = DataType.Value(config_type(tensor.dtype, tensor.name))
    if entry.dims:
        return
    item = tensor.shape[1:] if batching else tensor.shape
    if item:
        entry.dims.extend(item)
    else:
        # A scalar per batch item: config dims may not be empty, so [1] reshaped to [].
        entry.dims.append(1)
        if not entry.HasField("reshape"):
            entry.reshape.SetInParent()


def _fits(configured: Shape, engine: Shape) -> bool:
    # A fixed engine dimension needs the same fixed size in the config: a -1 there would
    # let requests through that the engine must refuse.
    return len(configured) == len(engine) and all(
        e == -1 or c == e for c, e in zip(configured, engine, strict=True))


def _batch_too_large(config: ModelConfig, limit: int, model: str) -> Exception:
    if limit == 0:
        return invalid_arg(
            f"model '{model}': max_batch_size is {config.max_batch_size}, but the TensorRT "
            f"engine cannot batch (its I/O tensors need a dynamic (-1) leading dimension, and "
            f"configured dims one shorter than the engine's); set max_batch_size: 0")
    return invalid_arg(
        f"model '{model}': max_batch_size is {config.max_batch_size}, but the TensorRT "
        f"engine's optimization profiles used by the instance groups accept batches of at most "
        f"{limit}")


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)
