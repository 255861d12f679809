"""CPU threads and the other process-wide torch settings, shared by every model.

torch keeps its intra-op thread count per calling thread (OpenMP and MKL settings are
thread-local; ``torch.set_num_threads`` on a thread sets that thread's count), and naiad runs
each instance on a thread of its own. So each CPU instance sets its count on its own thread
before it runs:

- a model with ``INTRA_OP_THREAD_COUNT`` (or ``NUM_THREADS``) uses that many threads;
- any other CPU instance uses an equal share of the cores this process may run on, split
  among the CPU instances loaded at that moment (at least one), so that instances times threads
  does not oversubscribe the cores. The share follows loads and unloads.

The inter-op pool (``INTER_OP_THREAD_COUNT``), the JIT executor, profiling and fuser switches
and cuDNN are global to the process and can be set once: as Triton documents for the inter-op
count, the first model that sets one wins, and a later model asking for another value gets a
warning in the log.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

from naiad_backend_torch.parameters import TorchSettings

log = logging.getLogger("naiad.backend.pytorch")


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class ThreadBudget:
    """The default intra-op thread count: the cores split among the live CPU instances."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = cores or available_cores()
        self._instances = 0
        self._lock = threading.Lock()

    def join(self) -> None:
        with self._lock:
            self._instances += 1

    def leave(self) -> None:
        with self._lock:
            self._instances = max(0, self._instances - 1)

    def share(self) -> int:
        """Threads for one instance that sets no count of its own."""
        return max(1, self.cores // max(1, self._instances))


def use_intra_op_threads(count: int) -> None:
    """Make the calling thread run torch ops on ``count`` threads (cheap when it already
    does: called before every execution)."""
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)


class ProcessSettings:
    """The settings torch holds once per process; the first model to set one decides it."""

    def __init__(self) -> None:
        self._chosen: dict[str, tuple[Any, str]] = {}
        self._lock = threading.Lock()

    def apply(self, model: str, settings: TorchSettings) -> None:
        with self._lock:
            self._set(model, "INTER_OP_THREAD_COUNT", settings.inter_op_threads,
                      _set_interop_threads)
            self._set(model, "ENABLE_JIT_EXECUTOR", settings.jit_executor,
                      torch._C._jit_set_profiling_executor)
            self._set(model, "ENABLE_JIT_PROFILING", settings.jit_profiling,
                      torch._C._jit_set_profiling_mode)
            self._set(model, "ENABLE_NVFUSER", settings.nvfuser, _set_nvfuser)
            # Triton ignores the tensor fuser switch when NvFuser is set either way.
            if settings.nvfuser is None:
                self._set(model, "ENABLE_TENSOR_FUSER", settings.tensor_fuser,
                          torch._C._jit_set_texpr_fuser_enabled)
            if not settings.cudnn:
                self._set(model, "DISABLE_CUDNN", True, _disable_cudnn)

    def _set(self, model: str, key: str, value: Any, setter: Callable[[Any], Any]) -> None:
        if value is None:
            return
        chosen = self._chosen.get(key)
        if chosen is not None:
            if chosen[0] != value:
                log.warning("model '%s' sets %s=%s, but model '%s' already set it to %s for "
                            "the whole process; keeping %s", model, key, value, chosen[1],
                            chosen[0], chosen[0])
            return
        try:
            setter(value)
        except RuntimeError as exc:  # e.g. the inter-op pool has already started
            log.warning("model '%s': cannot apply %s=%s: %s", model, key, value, exc)
        self._chosen[key] = (value, model)


def _set_interop_threads(count: int) -> None:
    if torch.get_num_interop_threads() != count:
        torch.set_num_interop_threads(count)


def _set_nvfuser(enabled: bool) -> None:
    can_enable = getattr(torch._C, "_jit_nvfuser_can_be_enabled", lambda: False)
    if enabled and not can_enable():
        raise RuntimeError(f"NvFuser is not available in torch {torch.__version__} (it was "
                           f"removed from PyTorch); the default fuser is used")
    if enabled or can_enable():
        torch._C._jit_set_nvfuser_enabled(enabled)


def _disable_cudnn(_: bool) -> None:
    torch.backends.cudnn.enabled = False
