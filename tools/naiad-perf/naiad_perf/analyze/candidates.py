"""The search space: which settings of a model's configuration are swept, with which values,
and how one candidate (a value per setting) becomes a full configuration to load.

A candidate is a mapping from dimension name to an integer value. Dimensions that only mean
something with dynamic batching on are left out of a candidate that has it off, so two
candidates that load the same configuration have the same key.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Candidate = dict[str, int]

INSTANCE_COUNT = "instance_count"
MAX_BATCH_SIZE = "max_batch_size"
DYNAMIC_BATCHING = "dynamic_batching"
QUEUE_DELAY = "max_queue_delay_us"
PREFERRED_BATCH = "preferred_batch_size"

# Thread settings per backend: the keys of config.pbtxt's ``parameters`` each backend reads
# (Triton's names). A value of 0 leaves the key out: the backend's own CPU-aware default.
THREAD_PARAMETERS = {
    "onnxruntime": ("intra_op_thread_count", "inter_op_thread_count"),
    "pytorch": ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
}
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "ensemble": "ensemble",
}
KIND_CPU = "KIND_CPU"
KIND_GPU = "KIND_GPU"


@dataclass(frozen=True)
class Dimension:
    """One swept setting: its values in search order (ascending) and its default (the value
    in the model's own configuration)."""

    name: str
    values: tuple[int, ...]
    default: int
    needs_dynamic_batching: bool = False


@dataclass(frozen=True)
class SweepBounds:
    """The command line's bounds on the space (``--max-instance-count`` and friends)."""

    max_instance_count: int = 4
    max_batch_size: int = 32
    queue_delays_us: tuple[int, ...] = (0, 100, 500, 2000)
    max_thread_count: int = 4
    client_batch_size: int = 1  # the load's batch size: max_batch_size may not go below it


def backend_of(config: Mapping[str, Any]) -> str:
    """The backend that serves ``config``: ``backend``, else the one its ``platform`` maps to."""
    backend = str(config.get("backend") or "")
    if backend:
        return backend
    return PLATFORM_BACKENDS.get(str(config.get("platform") or ""), "")


def _powers_of_two(upper: int) -> list[int]:
    values, value = [], 1
    while value <= upper:
        values.append(value)
        value *= 2
    return values


def _with_default(values: list[int], default: int) -> tuple[int, ...]:
    return tuple(sorted(set(values) | {default}))


def _instance_count(config: Mapping[str, Any]) -> int:
    groups = config.get("instance_group") or []
    return max(1, sum(int(group.get("count", 1) or 1) for group in groups))


@dataclass
class SearchSpace:
    """The dimensions swept for one model and how a candidate becomes its configuration."""

    original: dict[str, Any]
    dimensions: list[Dimension]
    instance_kind: str = KIND_CPU
    gpus: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, config: Mapping[str, Any], *, gpu_count: int,
              bounds: SweepBounds) -> SearchSpace:
        """The space for a model whose served configuration is ``config`` (the JSON of
        ``GET /v2/models/M/config``) on a server that reports ``gpu_count`` GPUs."""
        original = copy.deepcopy(dict(config))
        backend = backend_of(original)
        notes: list[str] = []
        if backend == "ensemble":
            raise ValueError(f"model '{original.get('name')}' is an ensemble: analyze its "
                             "composing models one at a time")
        groups = original.get("instance_group") or []
        kind, gpus = KIND_CPU, []
        wants_gpu = any(group.get("kind") == KIND_GPU for group in groups)
        if wants_gpu and gpu_count > 0:
            kind = KIND_GPU
            gpus = sorted({int(g) for group in groups for g in group.get("gpus", [])})
        elif gpu_count == 0:
            # Model Analyzer's quick search proposes KIND_GPU groups whatever the machine; a
            # server without a GPU cannot load them, so every candidate here is KIND_CPU.
            notes.append("the server reports no GPU: every candidate uses KIND_CPU instances")
        if len(groups) > 1:
            notes.append(f"the model's {len(groups)} instance groups are swept as one group")
        default_count = _instance_count(original)
        dimensions = [Dimension(INSTANCE_COUNT, _with_default(
            list(range(1, bounds.max_instance_count + 1)), default_count), default_count)]

        model_batch = int(original.get("max_batch_size", 0) or 0)
        if model_batch > 0 and "sequence_batching" not in original:
            dynamic = "dynamic_batching" in original
            batching = original.get("dynamic_batching") or {}
            delay = int(batching.get("max_queue_delay_microseconds", 0) or 0)
            preferred = [int(v) for v in batching.get("preferred_batch_size", [])]
            preferred_default = max(preferred) if preferred else 0
            sizes = [v for v in _powers_of_two(bounds.max_batch_size)
                     if v >= bounds.client_batch_size]
            dimensions += [
                Dimension(DYNAMIC_BATCHING, (0, 1), int(dynamic)),
                Dimension(MAX_BATCH_SIZE, _with_default(sizes, model_batch), model_batch),
                Dimension(QUEUE_DELAY, _with_default(list(bounds.queue_delays_us), delay),
                          delay, needs_dynamic_batching=True),
                Dimension(PREFERRED_BATCH, _with_default([0, *sizes], preferred_default),
                          preferred_default, needs_dynamic_batching=True),
            ]
        elif model_batch == 0:
            notes.append("max_batch_size is 0 (the model does not batch): batching not swept")
        else:
            notes.append("a sequence batcher schedules this model: batching not swept")

        keys = THREAD_PARAMETERS.get(backend, ())
        parameters = original.get("parameters") or {}
        for key in keys:
            raw = (parameters.get(key) or {}).get("string_value", "0")
            default = int(raw) if str(raw).strip().isdigit() else 0
            dimensions.append(Dimension(key, _with_default(
                [0, *_powers_of_two(bounds.max_thread_count)], default), default))
        if not keys:
            notes.append(f"backend '{backend}': no thread settings to sweep")
        return cls(original, dimensions, kind, gpus, notes)

    # --- candidates --------------------------------------------------------------------------

    def dimension(self, name: str) -> Dimension:
        return next(d for d in self.dimensions if d.name == name)

    def active(self, candidate: Mapping[str, int]) -> list[Dimension]:
        """The dimensions that mean something for ``candidate``."""
        dynamic = bool(candidate.get(DYNAMIC_BATCHING, 0))
        return [d for d in self.dimensions if dynamic or not d.needs_dynamic_batching]

    def normalise(self, values: Mapping[str, int]) -> Candidate:
        """``values`` restricted to the dimensions that apply, missing ones at their default."""
        full = {d.name: int(values.get(d.name, d.default)) for d in self.dimensions}
        return {d.name: full[d.name] for d in self.active(full)}

    def default(self) -> Candidate:
        return self.normalise({})

    def valid(self, candidate: Mapping[str, int]) -> bool:
        """False for a combination no server accepts (a preferred size above the maximum)."""
        preferred = candidate.get(PREFERRED_BATCH, 0)
        return not (preferred and preferred > candidate.get(MAX_BATCH_SIZE, 0))

    def grid(self) -> Iterator[Candidate]:
        """Every valid candidate once, nearest the default first (fewest settings changed)."""
        seen: set[str] = set()
        found: list[Candidate] = []
        names = [d.name for d in self.dimensions]
        for combo in itertools.product(*(d.values for d in self.dimensions)):
            candidate = self.normalise(dict(zip(names, combo, strict=True)))
            name = key(candidate)
            if name not in seen and self.valid(candidate):
                seen.add(name)
                found.append(candidate)
        defaults = {d.name: d.default for d in self.dimensions}

        def distance(candidate: Candidate) -> int:
            # Settings changed from the model's own; turning dynamic batching on is one
            # change, its delay and preferred size count only when they differ as well.
            return sum(candidate.get(name, value) != value for name, value in defaults.items())

        found.sort(key=lambda c: (distance(c), [c.get(d.name, -1) for d in self.dimensions]))
        yield from found

    # --- configuration ------------------------------------------------------------------------

    def config_for(self, candidate: Mapping[str, int]) -> dict[str, Any]:
        """The full configuration that loads ``candidate`` (the original with its settings)."""
        config = copy.deepcopy(self.original)
        group: dict[str, Any] = {"count": candidate[INSTANCE_COUNT], "kind": self.instance_kind}
        if self.instance_kind == KIND_GPU and self.gpus:
            group["gpus"] = self.gpus
        config["instance_group"] = [group]
        if MAX_BATCH_SIZE in candidate:
            config["max_batch_size"] = candidate[MAX_BATCH_SIZE]
        if DYNAMIC_BATCHING in candidate:
            if candidate[DYNAMIC_BATCHING]:
                batching = dict(config.get("dynamic_batching") or {})
                batching["max_queue_delay_microseconds"] = candidate[QUEUE_DELAY]
                if candidate[PREFERRED_BATCH]:
                    batching["preferred_batch_size"] = [candidate[PREFERRED_BATCH]]
                else:
                    batching.pop("preferred_batch_size", None)
                config["dynamic_batching"] = batching
            else:
                config.pop("dynamic_batching", None)
        for dimension in self.dimensions:
            if dimension.name in THREAD_PARAMETERS.get(backend_of(config), ()):
                parameters = dict(config.get("parameters") or {})
                value = candidate.get(dimension.name, 0)
                if value:
                    parameters[dimension.name] = {"string_value": str(value)}
                else:
                    parameters.pop(dimension.name, None)
                config["parameters"] = parameters
        return config


def key(candidate: Mapping[str, int]) -> str:
    """A stable name for a candidate: ``instance_count=2,dynamic_batching=1,...``."""
    return ",".join(f"{name}={value}" for name, value in candidate.items())


SHORT_NAMES = {INSTANCE_COUNT: "inst", MAX_BATCH_SIZE: "mbs", DYNAMIC_BATCHING: "dyn",
               QUEUE_DELAY: "delay_us", PREFERRED_BATCH: "pref"}


def describe(candidate: Mapping[str, int]) -> str:
    """A short label for tables and charts: ``inst=2 mbs=8 dyn=1 delay_us=100``."""
    parts = []
    for name, value in candidate.items():
        if not value and (name == PREFERRED_BATCH or name not in SHORT_NAMES):
            continue  # no preferred size, or a thread count left at the backend's default
        parts.append(f"{SHORT_NAMES.get(name, name)}={value}")
    return " ".join(parts)
