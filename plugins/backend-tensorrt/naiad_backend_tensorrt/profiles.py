"""Optimization profiles: which ones an instance may use, and which one fits a batch.

A TensorRT engine built for dynamic shapes carries one or more optimization profiles, each a
(min, opt, max) shape per input. An execution context runs under one profile at a time, and
only shapes inside its range. As in Triton, ``instance_group { profile: [...] }`` lists the
profiles an instance may use (profile 0 when it lists none), and each batch runs under the
listed profile that accepts its shapes and whose optimum shapes are nearest to them.

Everything here works on plain tuples, with no tensorrt module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from naiad.backend_utils import format_shape
from naiad.errors import invalid_arg

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProfileShape:
    """The shapes one optimization profile accepts for one input: ``min`` to ``max`` in
    every dimension, tuned for ``opt``."""

    min: Shape
    opt: Shape
    max: Shape

    def accepts(self, shape: Shape) -> bool:
        return len(shape) == len(self.min) and all(
            low <= size <= high for low, size, high in zip(self.min, shape, self.max, strict=True))

    def distance(self, shape: Shape) -> int:
        """How far ``shape`` is from the shape this profile was tuned for."""
        return sum(abs(opt - size) for opt, size in zip(self.opt, shape, strict=True))

    def describe(self) -> str:
        return f"{format_shape(self.min)} to {format_shape(self.max)}"


ProfileTable = Mapping[int, Mapping[str, ProfileShape]]
"""Profile index -> input name -> the shapes that profile accepts for that input."""


def select_profile(profiles: ProfileTable, shapes: Mapping[str, Shape], model: str) -> int:
    """The profile to run a batch whose inputs have ``shapes`` under: among the profiles that
    accept every shape, the one whose optimum shapes are nearest (the lowest index on a tie).
    Raises an INVALID_ARG error naming the model, the shapes and each profile's range when
    none accepts them."""
    best: tuple[int, int] | None = None  # (distance, index)
    for index, by_input in profiles.items():
        distance = 0
        for name, accepted in by_input.items():
            shape = shapes.get(name)
            if shape is None or not accepted.accepts(shape):
                break
            distance += accepted.distance(shape)
        else:
            if best is None or (distance, index) < best:
                best = (distance, index)
    if best is not None:
        return best[1]
    if not profiles:
        raise invalid_arg(f"model '{model}': the instance has no optimization profile to run on")
    asked = ", ".join(f"'{name}' {format_shape(shape)}" for name, shape in shapes.items())
    ranges = "; ".join(
        f"profile {index} accepts " + ", ".join(
            f"'{name}' {accepted.describe()}" for name, accepted in by_input.items())
        for index, by_input in profiles.items())
    raise invalid_arg(f"model '{model}': no optimization profile of the TensorRT engine accepts "
                      f"the input shapes {asked} (with the batch dimension); {ranges}")


def batch_limit(ranges: Iterable[ProfileShape]) -> int:
    """The largest batch one profile accepts: the smallest leading ``max`` among its inputs
    (0 when it has none)."""
    limits = [accepted.max[0] for accepted in ranges if accepted.max]
    return min(limits) if limits else 0


def group_profiles(group: Any, num_profiles: int, model: str) -> list[int]:
    """The profile indices an instance group lists (``profile: ["0", "2"]``), checked against
    the engine's ``num_profiles``; ``[0]`` when the group lists none, as in Triton."""
    indices: list[int] = []
    for text in group.profile:
        index = int(text) if text.strip().isdigit() else -1
        if not 0 <= index < num_profiles:
            raise invalid_arg(
                f"model '{model}': instance group '{group.name}' names optimization profile "
                f"'{text}', but the TensorRT engine has {num_profiles} profile(s), numbered 0 "
                f"to {num_profiles - 1}")
        if index not in indices:
            indices.append(index)
    return indices or [0]


def configured_profiles(groups: Sequence[Any], num_profiles: int, model: str) -> list[int]:
    """Every profile some instance group may use (``[0]`` without instance groups)."""
    found: set[int] = set()
    for group in groups:
        found.update(group_profiles(group, num_profiles, model))
    return sorted(found) or [0]
