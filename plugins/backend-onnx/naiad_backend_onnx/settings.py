"""What a model's config.pbtxt and ``--backend-config onnxruntime,...`` ask of ONNX Runtime.

The names are Triton's onnxruntime backend's: ``parameters`` keys ``intra_op_thread_count``,
``inter_op_thread_count``, ``execution_mode``, ``enable_mem_arena``, ``enable_mem_pattern``,
``memory.enable_memory_arena_shrinkage``, ``session.use_device_allocator_for_initializers``
and ``share_session_between_instances``; ``optimization { graph { level } }``; and the
backend settings ``default-max-batch-size``, ``intra_op_thread_count`` and
``inter_op_thread_count``. Everything is parsed and checked once, at load time, and a bad
value fails the load with a message naming the model, the key and what was expected.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from naiad.errors import invalid_arg
from naiad.settings import boolean, integer, read

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.onnxruntime")

# Triton's default for --backend-config onnxruntime,default-max-batch-size.
DEFAULT_MAX_BATCH_SIZE = 4

# optimization { graph { level } } -> ONNX Runtime's GraphOptimizationLevel, as Triton maps
# it (0, the proto default, is every optimization).
GRAPH_LEVELS = {
    -1: "ORT_ENABLE_BASIC",
    0: "ORT_ENABLE_ALL",
    1: "ORT_ENABLE_EXTENDED",
    2: "ORT_DISABLE_ALL",
}

BACKEND_KEYS = ("default-max-batch-size", "intra_op_thread_count", "inter_op_thread_count",
                "enable-global-threadpool")

def parameter(config: ModelConfig, key: str) -> str | None:
    """The ``string_value`` of ``parameters { key: KEY }`` in config.pbtxt, or None."""
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value


def available_cpus() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class BackendSettings:
    """``--backend-config onnxruntime,KEY=VALUE``: settings for every ONNX model."""

    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    # Thread counts for models whose config.pbtxt does not set them (None: CPU-aware).
    intra_op_thread_count: int | None = None
    inter_op_thread_count: int | None = None

    @classmethod
    def parse(cls, values: dict[str, str]) -> BackendSettings:
        where = "--backend-config onnxruntime,"

        unknown = sorted(set(values) - set(BACKEND_KEYS))
        if unknown:
            log.warning("the onnxruntime backend ignores --backend-config keys %s (it reads "
                        "%s)", ", ".join(unknown), ", ".join(BACKEND_KEYS))
        if read(values, "enable-global-threadpool", False, boolean, where=where):
            # ONNX Runtime's Python API has no global thread pools; the per-session defaults
            # below already keep sessions from oversubscribing the cores.
            log.warning("--backend-config onnxruntime,enable-global-threadpool=1 is not "
                        "supported: each session gets its own thread pools, sized so that "
                        "all instances together use the available cores")
        return cls(
            default_max_batch_size=read(values, "default-max-batch-size",
                                        DEFAULT_MAX_BATCH_SIZE, integer, minimum=0,
                                        where=where),
            intra_op_thread_count=read(values, "intra_op_thread_count", None, integer,
                                       minimum=0, where=where),
            inter_op_thread_count=read(values, "inter_op_thread_count", None, integer,
                                       minimum=0, where=where),
        )


@dataclass(frozen=True)
class SessionSettings:
    """The session options of one model (the same for each of its instances)."""

    intra_op_threads: int  # 0: ONNX Runtime's own default (one per core)
    inter_op_threads: int
    parallel: bool  # execution_mode 1 (ORT_PARALLEL) rather than 0 (ORT_SEQUENTIAL)
    graph_level: str  # a GraphOptimizationLevel member name
    enable_mem_arena: bool | None = None
    enable_mem_pattern: bool | None = None
    share_session: bool = False
    session_config: dict[str, str] = field(default_factory=dict)
    run_config: dict[str, str] = field(default_factory=dict)


def session_settings(config: ModelConfig, model_name: str, backend: BackendSettings,
                     cpus: int | None = None) -> SessionSettings:
    """Read the session options of ``config``; ``cpus`` defaults to :func:`available_cpus`."""

    where = f"model '{model_name}': parameter "

    def what(key: str) -> str:
        return f"model '{model_name}': parameter '{key}'"

    def int_parameter(key: str, minimum: int = 0) -> int | None:
        value = parameter(config, key)
        return None if value is None else integer(key, value, minimum=minimum, where=where)

    def bool_parameter(key: str) -> bool | None:
        value = parameter(config, key)
        return None if value is None else boolean(key, value, where=where)

    mode = int_parameter("execution_mode")
    if mode not in (None, 0, 1):
        raise invalid_arg(f"{what('execution_mode')} must be 0 (sequential) or 1 (parallel), "
                          f"got {mode}")
    parallel = mode == 1
    level = config.optimization.graph.level
    if level not in GRAPH_LEVELS:
        raise invalid_arg(
            f"model '{model_name}': optimization {{ graph {{ level: {level} }} }} is not a "
            f"graph optimization level; expected -1 (basic), 0 (all, the default), "
            f"1 (basic and extended) or 2 (disabled)")
    share = bool_parameter("share_session_between_instances") or False

    # Several instances each with a pool of one thread per core would fight over the cores
    # (N instances x C threads on C cores). Unless the config or --backend-config says
    # otherwise, the cores are shared out: each session gets cores / sessions threads.
    budget = max(1, (cpus or available_cpus()) // session_count(config, share))
    intra = _first(int_parameter("intra_op_thread_count"), backend.intra_op_thread_count,
                   budget)
    # Sequential execution runs one node at a time and uses no inter-op pool.
    inter = _first(int_parameter("inter_op_thread_count"), backend.inter_op_thread_count,
                   budget if parallel else 1)

    session_config = {}
    value = parameter(config, "session.use_device_allocator_for_initializers")
    if value is not None:
        session_config["session.use_device_allocator_for_initializers"] = value
    run_config = {}
    value = parameter(config, "memory.enable_memory_arena_shrinkage")
    if value is not None:
        run_config["memory.enable_memory_arena_shrinkage"] = value
    return SessionSettings(
        intra_op_threads=intra,
        inter_op_threads=inter,
        parallel=parallel,
        graph_level=GRAPH_LEVELS[level],
        enable_mem_arena=bool_parameter("enable_mem_arena"),
        enable_mem_pattern=bool_parameter("enable_mem_pattern"),
        share_session=share,
        session_config=session_config,
        run_config=run_config,
    )


def session_count(config: ModelConfig, shared: bool = False) -> int:
    """How many ONNX Runtime sessions the model's instance groups make: one per instance
    (a KIND_GPU group has ``count`` per listed GPU), or one per group and device when
    ``share_session_between_instances`` is set."""
    total = 0
    for group in config.instance_group:
        devices = max(len(group.gpus), 1) if group.kind == ModelInstanceGroup.KIND_GPU else 1
        total += devices if shared else devices * max(group.count, 1)
    return max(total, 1)


def instance_group_name(config: ModelConfig, index: int) -> str:
    """The name of the instance group holding the model's ``index``-th instance, counted
    as the core expands ``instance_group`` (``count`` instances per device, group by
    group)."""
    start = 0
    for group in config.instance_group:
        devices = max(len(group.gpus), 1) if group.kind == ModelInstanceGroup.KIND_GPU else 1
        start += devices * max(group.count, 1)
        if index < start:
            return group.name
    return ""


def _first(*values: int | None) -> int:
    for value in values:
        if value is not None:
            return value
    raise AssertionError("the last value is never None")
