"""An ensemble's steps as a dependency graph, checked once when the ensemble loads.

``ensemble_scheduling.step`` names, for each step, a model and two maps: ``input_map`` from the
step model's input names to ensemble tensor names, and ``output_map`` from its output names to
ensemble tensor names. Ensemble tensors are the ensemble's own inputs plus whatever a step
produces. The plan works out which step waits for which (a step runs as soon as every tensor it
reads exists), and refuses, with the reason, an ensemble whose steps read a tensor nobody
produces, produce one tensor twice, form a cycle, or leave an ensemble output unproduced.
Once the step models are loaded, datatypes and shapes are checked along every edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.datatypes import format_shape
from naiad.errors import InferenceServerError, unavailable
from naiad.models.signature import ModelSignature, TensorSpec

# (model name, version or "" for the latest) -> the serving model's signature, or an error.
SignatureLookup = Callable[[str, str], ModelSignature]


@dataclass(slots=True, frozen=True)
class EnsembleStep:
    """One step: which model it calls and how ensemble tensors map onto its inputs/outputs."""

    index: int
    model_name: str
    model_version: str  # "" means the latest ready version (model_version -1)
    # step model input name -> ensemble tensor name
    inputs: tuple[tuple[str, str], ...]
    # step model output name -> ensemble tensor name
    outputs: tuple[tuple[str, str], ...]
    # indices of the steps whose outputs this step reads
    after: tuple[int, ...]

    def describe(self) -> str:
        return f"step {self.index} (model '{self.model_name}')"


@dataclass(slots=True, frozen=True)
class EnsemblePlan:
    """The steps of one ensemble, in an order where every step comes after its producers."""

    name: str
    steps: tuple[EnsembleStep, ...]
    # ensemble output name -> the step that produces it
    output_producers: dict[str, int]


def build_plan(config: ModelConfig) -> EnsemblePlan:
    """Check the ensemble's steps form a graph that can run, and order them.

    Raises UNAVAILABLE with the reason when they cannot (the model then fails to load).
    """
    name = config.name
    ensemble_inputs = {t.name for t in config.input}
    producer: dict[str, int] = {tensor: -1 for tensor in ensemble_inputs}
    for index, step in enumerate(config.ensemble_scheduling.step):
        for model_output, tensor in step.output_map.items():
            if tensor in ensemble_inputs:
                raise _problem(name, f"step {index} (model '{step.model_name}') writes its "
                                     f"output '{model_output}' to '{tensor}', which is an "
                                     f"input of the ensemble")
            if tensor in producer:
                raise _problem(name, f"tensor '{tensor}' is produced by both step "
                                     f"{producer[tensor]} and step {index}")
            producer[tensor] = index
    steps = []
    for index, step in enumerate(config.ensemble_scheduling.step):
        after = set()
        for model_input, tensor in step.input_map.items():
            if tensor not in producer:
                raise _problem(name, f"step {index} (model '{step.model_name}') reads "
                                     f"'{tensor}' for its input '{model_input}', but no step "
                                     f"produces it and it is not an ensemble input")
            if producer[tensor] >= 0:
                after.add(producer[tensor])
        version = "" if step.model_version < 0 else str(step.model_version)
        steps.append(EnsembleStep(index, step.model_name, version,
                                  tuple(sorted(step.input_map.items())),
                                  tuple(sorted(step.output_map.items())),
                                  tuple(sorted(after))))
    ordered = _topological_order(name, steps)
    outputs: dict[str, int] = {}
    for output in config.output:
        where = producer.get(output.name)
        if where is None or where < 0:
            raise _problem(name, f"no step produces the ensemble output '{output.name}'")
        outputs[output.name] = where
    consumed = {tensor for step in steps for _, tensor in step.inputs}
    unused = sorted(ensemble_inputs - consumed)
    if unused:
        raise _problem(name, f"ensemble input(s) {', '.join(repr(u) for u in unused)} are "
                             f"not read by any step")
    return EnsemblePlan(name, tuple(ordered), outputs)


def decoupled_steps(config: ModelConfig, lookup: Callable[[str, str], Any]) -> list[str]:
    """The models of the ensemble's steps that are decoupled (``lookup(name, version)``
    gives the serving model; one that cannot be had is left to :func:`check_steps`).
    Triton marks such an ensemble decoupled: each of their responses flows on."""
    found = []
    for step in config.ensemble_scheduling.step:
        version = "" if step.model_version < 0 else str(step.model_version)
        try:
            if lookup(step.model_name, version).decoupled:
                found.append(step.model_name)
        except InferenceServerError:
            continue
    return found


def check_steps(plan: EnsemblePlan, config: ModelConfig, lookup: SignatureLookup) -> None:
    """Check every step against the model that serves it now: the model is ready, the maps
    name its real inputs and outputs, and datatypes agree along every edge."""
    name = plan.name
    ensemble = ModelSignature(name, config)
    signature_of: dict[int, ModelSignature] = {}
    for step in plan.steps:
        try:
            signature = lookup(step.model_name, step.model_version)
        except InferenceServerError as exc:
            raise _problem(name, f"{step.describe()} cannot be served: {exc.message}") from None
        signature_of[step.index] = signature
    produced_types = {tensor: spec.datatype for tensor, spec in ensemble.inputs.items()}
    # ensemble tensor -> (full shape, where it comes from), to compare with every reader
    produced_shapes = {tensor: (_full_shape(spec, ensemble), f"ensemble '{name}'")
                       for tensor, spec in ensemble.inputs.items()}
    for step in plan.steps:
        signature = signature_of[step.index]
        if config.max_batch_size > signature.max_batch_size:
            # The ensemble's batch dimension reaches every step, as in Triton.
            raise _problem(name, f"the ensemble allows batches of up to "
                                 f"{config.max_batch_size}, but {step.describe()} allows "
                                 f"{signature.max_batch_size} (max_batch_size)")
        for model_input, tensor in step.inputs:
            spec = signature.inputs.get(model_input)
            if spec is None:
                raise _problem(name, f"{step.describe()} maps '{tensor}' to input "
                                     f"'{model_input}', which the model does not have (it has "
                                     f"{_names(signature.inputs)})")
            have = produced_types[tensor]
            if have != spec.datatype:
                raise _problem(name, f"{step.describe()} input '{model_input}' is "
                                     f"{spec.datatype}, but the ensemble tensor '{tensor}' "
                                     f"it reads is {have}")
            _check_shape(name, tensor, produced_shapes[tensor],
                         (_full_shape(spec, signature),
                          f"{step.describe()}, input '{model_input}'"))
        for model_output, tensor in step.outputs:
            spec = signature.outputs.get(model_output)
            if spec is None:
                raise _problem(name, f"{step.describe()} maps output '{model_output}', which "
                                     f"the model does not have (it has "
                                     f"{_names(signature.outputs)})")
            produced_types[tensor] = spec.datatype
            produced_shapes[tensor] = (_full_shape(spec, signature),
                                       f"{step.describe()}, output '{model_output}'")
    steps = {step.index: step for step in plan.steps}
    for output, spec in ensemble.outputs.items():
        if produced_types[output] != spec.datatype:
            producer = steps[plan.output_producers[output]]
            raise _problem(name, f"ensemble output '{output}' is {spec.datatype}, but "
                                 f"{producer.describe()} produces {produced_types[output]}")
        _check_shape(name, output, produced_shapes[output],
                     (_full_shape(spec, ensemble), f"ensemble output '{output}'"))


def _full_shape(spec: TensorSpec, model: ModelSignature) -> tuple[int, ...]:
    """A tensor's shape as it travels between steps: with the batch dimension (-1) when
    its model batches."""
    return (-1, *spec.dims) if model.max_batch_size > 0 else spec.dims


def _check_shape(name: str, tensor: str, produced: tuple[tuple[int, ...], str],
                 read: tuple[tuple[int, ...], str]) -> None:
    """Triton's rule along an ensemble edge: the same rank, and every dimension equal
    where neither side is variable (-1); what stays variable is checked per request."""
    have, source = produced
    want, reader = read
    if len(have) == len(want) and all(a == b or -1 in (a, b)
                                      for a, b in zip(have, want, strict=True)):
        return
    raise _problem(name, f"ensemble tensor '{tensor}': inconsistent shape: "
                         f"{format_shape(have)} from {source}, {format_shape(want)} for "
                         f"{reader} (shapes include the batch dimension where the model "
                         f"batches)")


def _topological_order(name: str, steps: list[EnsembleStep]) -> list[EnsembleStep]:
    remaining = {step.index: set(step.after) for step in steps}
    ordered: list[EnsembleStep] = []
    while remaining:
        ready = sorted(i for i, deps in remaining.items() if not deps)
        if not ready:
            cycle = ", ".join(str(i) for i in _cycle_members(remaining))
            raise _problem(name, f"steps {cycle} wait on each other's outputs (a cycle)")
        for index in ready:
            del remaining[index]
            ordered.append(steps[index])
        for deps in remaining.values():
            deps.difference_update(ready)
    return ordered


def _cycle_members(waiting: dict[int, set[int]]) -> list[int]:
    """The steps on a cycle: drop, again and again, the steps no other step waits for (they
    are only downstream of one)."""
    members = {i: set(deps) for i, deps in waiting.items()}
    while True:
        needed = {d for deps in members.values() for d in deps}
        downstream = [i for i in members if i not in needed]
        if not downstream:
            return sorted(members)
        for i in downstream:
            del members[i]


def _problem(name: str, reason: str) -> InferenceServerError:
    return unavailable(f"ensemble '{name}': {reason}")


def _names(names: object) -> str:
    return ", ".join(f"'{n}'" for n in names) or "none"  # type: ignore[attr-defined]
