"""Importing TensorRT when a model needs it, and deserializing its engine file.

``tensorrt`` is imported here and nowhere else, inside functions: the plugin module imports
without it, and a machine without it gets a load error naming the package to install.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naiad.errors import unavailable
from naiad_backend_tensorrt.cuda import CUDA_PACKAGE

log = logging.getLogger("naiad.backend.tensorrt")

TENSORRT_PACKAGE = "tensorrt"
MIN_TENSORRT_MAJOR = 10
"""The named-tensor API (``execute_async_v3``, ``set_input_shape``) this backend uses."""


def missing_packages() -> list[str]:
    """The distributions to ``pip install`` before this backend can run, found without
    importing anything heavy."""
    wanted = (("tensorrt", TENSORRT_PACKAGE), ("cuda.bindings", CUDA_PACKAGE))
    return [package for module, package in wanted if not _importable(module)]


def _importable(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None  # None: imports of it are blocked
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing or blocked
        return False


def import_tensorrt(model: str) -> Any:
    """The ``tensorrt`` module, or an UNAVAILABLE error naming the package to install."""
    try:
        import tensorrt
    except (ImportError, OSError) as exc:  # OSError: the wheel is there, libnvinfer is not
        raise unavailable(
            f"model '{model}': the TensorRT backend needs the '{TENSORRT_PACKAGE}' Python "
            f"package, which cannot be imported ({type(exc).__name__}: {exc}); install it "
            f"with 'pip install {TENSORRT_PACKAGE}' (CUDA 13 drivers) or 'pip install "
            f"tensorrt-cu12' (CUDA 12 drivers)") from exc
    version = str(getattr(tensorrt, "__version__", "0"))
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < MIN_TENSORRT_MAJOR:
        raise unavailable(f"model '{model}': TensorRT {version} is installed, but the TensorRT "
                          f"backend needs TensorRT {MIN_TENSORRT_MAJOR} or newer")
    return tensorrt


@dataclass
class LoadedEngine:
    """A deserialized engine with the runtime and logger it needs to stay alive."""

    runtime: Any
    engine: Any
    logger: Any


def load_engine(trt: Any, path: Path, model: str) -> LoadedEngine:
    """Deserialize the engine in ``path`` on the calling thread's current CUDA device."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise unavailable(f"model '{model}': cannot read the TensorRT engine file '{path}': "
                          f"{exc.strerror or exc}") from exc
    logger = make_logger(trt, model)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        detail = "; ".join(logger.errors[-3:]) or "no reason given"
        raise unavailable(
            f"model '{model}': TensorRT could not deserialize the engine in '{path}' "
            f"({detail}); an engine runs only with the TensorRT version and GPU kind it was "
            f"built for")
    return LoadedEngine(runtime, engine, logger)


def make_logger(trt: Any, model: str) -> Any:
    """A ``trt.ILogger`` that forwards to Python logging and remembers errors, so a failed
    call can say why."""

    class _Logger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.INTERNAL_ERROR, trt.ILogger.ERROR):
                self.errors.append(msg)
                log.error("model '%s': TensorRT: %s", model, msg)
            elif severity == trt.ILogger.WARNING:
                log.warning("model '%s': TensorRT: %s", model, msg)
            else:
                log.debug("model '%s': TensorRT: %s", model, msg)

    return _Logger()
