"""Triton's rules that tie config.pbtxt tensor names to a PyTorch model's arguments and results.

A PyTorch model has no tensor names of its own, only ``forward()`` argument names and the
positions of its results. Triton's PyTorch backend (``GetNamingConvention`` in
pytorch_backend ``libtorch.cc``) picks one convention for all inputs, in this order:

1. FORWARD_ARGUMENT: every config input is named after a ``forward()`` argument;
2. NAMED_INDEX: every config input is called ``<name>__<index>`` (``INPUT__0``), the index
   being the argument's position;
3. STRICT_CONFIG_ORDERING: otherwise the order of the inputs in config.pbtxt is the order of
   the arguments.

A model whose only argument is a ``Dict[str, Tensor]`` gets its inputs as that dictionary,
keyed by config name. Outputs follow NAMED_INDEX (``OUTPUT__1`` is the second element of a
returned tuple or list) or else config order; a model that returns a dictionary has its
outputs looked up by config name.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from naiad.errors import invalid_arg

log = logging.getLogger("naiad.backend.pytorch")

DELIMITER = "__"


class Convention(enum.Enum):
    FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
    NAMED_INDEX = "NAMED_INDEX"
    STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"
    DICTIONARY = "DICTIONARY"


@dataclass(frozen=True, slots=True)
class Arguments:
    """What a model's ``forward()`` takes: its argument names (``self`` left out), how many
    of them have no default value, and whether its only argument is a dictionary."""

    names: tuple[str, ...]
    required: int
    dictionary: bool = False


@dataclass(frozen=True, slots=True)
class InputBinding:
    """Where each config input goes: a positional index, or a dictionary key."""

    convention: Convention
    positions: dict[str, int]  # config name -> argument index (empty for DICTIONARY)
    count: int  # positional arguments passed (the highest index + 1)


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` tensor name, or None. Like Triton, the index is
    what follows the *first* ``__``, and must be all digits."""
    at = name.find(DELIMITER)
    if at < 0:
        return None
    digits = name[at + len(DELIMITER):]
    return int(digits) if digits.isdigit() else None


def bind_inputs(model: str, config_names: Sequence[str], arguments: Arguments) -> InputBinding:
    """Map config inputs to ``forward()`` arguments; raise a load error naming the model and
    the input when they cannot be matched."""
    if arguments.dictionary:
        return InputBinding(Convention.DICTIONARY, {}, 0)
    names = list(config_names)
    if all(name in arguments.names for name in names):
        convention = Convention.FORWARD_ARGUMENT
        positions = {name: arguments.names.index(name) for name in names}
    else:
        indices = [named_index(name) for name in names]
        if all(index is not None for index in indices):
            convention = Convention.NAMED_INDEX
            positions = {name: index for name, index in zip(names, indices, strict=True)
                         if index is not None}
        else:
            convention = Convention.STRICT_CONFIG_ORDERING
            positions = {name: i for i, name in enumerate(names)}
            log.warning("model '%s': inputs %s are neither forward() arguments %s nor named "
                        "<name>__<index>; they are passed in config.pbtxt order", model,
                        names, list(arguments.names))
    _check_unique(model, "input", positions)
    _check_no_gaps(model, positions)
    count = max(positions.values(), default=-1) + 1
    if not arguments.required <= count <= len(arguments.names):
        expected = (str(arguments.required) if arguments.required == len(arguments.names)
                    else f"{arguments.required} to {len(arguments.names)}")
        raise invalid_arg(
            f"unable to load model '{model}': configuration expects {count} inputs, model "
            f"provides {expected} (forward() arguments {list(arguments.names)}; inputs "
            f"bound by {convention.value}: {_describe(positions)})")
    return InputBinding(convention, positions, count)


def bind_outputs(model: str, config_names: Sequence[str]) -> dict[str, int]:
    """Config output name -> index into the model's returned tuple or list."""
    names = list(config_names)
    indices = [named_index(name) for name in names]
    if all(index is not None for index in indices):
        positions = {name: index for name, index in zip(names, indices, strict=True)
                     if index is not None}
    else:
        positions = {name: i for i, name in enumerate(names)}
    # Gaps are fine here: a config may leave out results it does not serve.
    _check_unique(model, "output", positions)
    return positions


def _check_unique(model: str, kind: str, positions: dict[str, int]) -> None:
    by_index: dict[int, str] = {}
    for name, index in positions.items():
        if index in by_index:
            raise invalid_arg(
                f"unable to load model '{model}': {kind}s '{by_index[index]}' and '{name}' "
                f"both refer to {kind} index {index}")
        by_index[index] = name


def _check_no_gaps(model: str, positions: dict[str, int]) -> None:
    # Arguments are passed by position, so none before the last one can be left out.
    taken = set(positions.values())
    missing = [i for i in range(len(taken)) if i not in taken]
    if missing:
        raise invalid_arg(
            f"unable to load model '{model}': no input in config.pbtxt gives forward() "
            f"argument {missing[0]} (inputs {_describe(positions)}); name them "
            f"<name>__0, <name>__1, ... without gaps")


def _describe(positions: dict[str, int]) -> str:
    return ", ".join(f"'{name}'->{index}" for name, index in positions.items())
