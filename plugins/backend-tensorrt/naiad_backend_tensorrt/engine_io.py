"""What an engine's inputs and outputs look like, as plain data.

:func:`read_engine_io` is the only place that asks a live ``ICudaEngine``; auto-complete,
config checks and profile selection work on the :class:`EngineIO` it returns, so they can be
tested (and reasoned about) without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naiad_backend_tensorrt.dtypes import trt_type_name
from naiad_backend_tensorrt.profiles import ProfileShape, Shape


@dataclass(frozen=True, slots=True)
class TensorIO:
    """One I/O tensor of an engine. ``shape`` has -1 where the size is dynamic."""

    name: str
    is_input: bool
    dtype: str  # TensorRT DataType member name, e.g. "FLOAT"
    shape: Shape
    # Inputs only: the (min, opt, max) shape each optimization profile accepts, by index.
    profiles: tuple[ProfileShape, ...] = ()
    # A shape tensor: its values, not only its size, feed TensorRT's shape inference.
    is_shape_tensor: bool = False
    # The buffer layout (trt.TensorFormat member name): only LINEAR is row-major, as numpy.
    layout: str = "LINEAR"


@dataclass(frozen=True, slots=True)
class EngineIO:
    """Every I/O tensor of an engine, in the engine's order, and its profile count."""

    tensors: tuple[TensorIO, ...]
    num_profiles: int = 1

    @property
    def inputs(self) -> list[TensorIO]:
        return [t for t in self.tensors if t.is_input]

    @property
    def outputs(self) -> list[TensorIO]:
        return [t for t in self.tensors if not t.is_input]

    def get(self, name: str) -> TensorIO | None:
        return next((t for t in self.tensors if t.name == name), None)


def read_engine_io(engine: Any, trt: Any) -> EngineIO:
    """Describe a deserialized ``trt.ICudaEngine`` (TensorRT 10+ named-tensor API)."""
    num_profiles = max(int(engine.num_optimization_profiles), 1)
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        is_shape_tensor = bool(engine.is_shape_inference_io(name))
        profiles: tuple[ProfileShape, ...] = ()
        if is_input and not is_shape_tensor:
            profiles = tuple(_profile_shape(engine, name, shape, p) for p in range(num_profiles))
        tensors.append(TensorIO(
            name=name,
            is_input=is_input,
            dtype=trt_type_name(engine.get_tensor_dtype(name)),
            shape=shape,
            profiles=profiles,
            is_shape_tensor=is_shape_tensor,
            layout=trt_type_name(engine.get_tensor_format(name)),
        ))
    return EngineIO(tuple(tensors), num_profiles)


def _profile_shape(engine: Any, name: str, shape: Shape, profile: int) -> ProfileShape:
    if -1 not in shape:
        # A static input accepts exactly its shape under every profile.
        return ProfileShape(shape, shape, shape)
    low, opt, high = engine.get_tensor_profile_shape(name, profile)
    return ProfileShape(tuple(low), tuple(opt), tuple(high))
