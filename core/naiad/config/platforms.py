"""Triton's ``platform`` and ``backend`` names: which backend serves a model.

The tables follow tritonserver 2.51 (``AutoCompleteBackendFields`` and ``ValidateModelConfig``
in triton-inference-server/core ``model_config_utils.cc``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from naiad.errors import invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

ENSEMBLE = "ensemble"
"""Both the platform and the backend name of the core's built-in ensemble scheduler."""

PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
    ENSEMBLE: ENSEMBLE,
}

# The platform Triton writes into the config of a model that only names its backend.
# TensorFlow has two platforms, so its backend alone does not choose one.
BACKEND_PLATFORMS = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}

# Backends that must agree with the platform; any other backend (python, a custom one) may be
# paired with any platform, as in Triton.
KNOWN_PLATFORM_BACKENDS = frozenset({"onnxruntime", "pytorch", "tensorrt", "tensorflow"})

DEFAULT_MODEL_FILENAMES = {
    "python": "model.py",
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "openvino": "model.xml",
}

PLATFORM_MODEL_FILENAMES = {
    "tensorflow_savedmodel": "model.savedmodel",
    "tensorflow_graphdef": "model.graphdef",
}

# Model files that identify a backend when the config names neither backend nor platform,
# in the order Triton tries them; True means the entry must be a directory.
_DETECT = (
    ("model.savedmodel", True, "tensorflow", "tensorflow_savedmodel"),
    ("model.graphdef", False, "tensorflow", "tensorflow_graphdef"),
    ("model.plan", False, "tensorrt", "tensorrt_plan"),
    ("model.onnx", None, "onnxruntime", "onnxruntime_onnx"),  # a file or a folder
    ("model.xml", None, "openvino", ""),
    ("model.pt", False, "pytorch", "pytorch_libtorch"),
    ("model.pt2", False, "pytorch", "pytorch_libtorch"),  # a torch.export program
    ("model.py", None, "python", ""),
)


def default_model_filename(backend: str, platform: str = "") -> str:
    """The model file a backend loads when the config gives no ``default_model_filename``."""
    return PLATFORM_MODEL_FILENAMES.get(platform) or DEFAULT_MODEL_FILENAMES.get(backend, "")


def resolve_backend(config: ModelConfig, model_name: str, model_dir: Path | None = None) -> str:
    """Fill ``config.backend`` (and ``config.platform`` where Triton does) and return the
    backend name; ``"ensemble"`` means the built-in ensemble scheduler, no backend plugin.

    With neither set, the model file in the first version folder of ``model_dir`` decides,
    then a model name of the form ``<anything>.<backend>``. Raises an error naming the model
    when no backend can be found or the platform and backend disagree.
    """
    platform, backend = config.platform, config.backend
    if platform == ENSEMBLE:
        if backend:
            raise invalid_arg(f"model '{model_name}': an ensemble (platform 'ensemble') must "
                              f"not name a backend, got backend '{backend}'")
        return ENSEMBLE
    if not backend and not platform:
        _detect(config, model_name, model_dir)
    elif not backend:
        if platform not in PLATFORM_BACKENDS:
            raise invalid_arg(
                f"model '{model_name}': unknown platform '{platform}'; expected one of "
                f"{', '.join(sorted(PLATFORM_BACKENDS))}, or set 'backend' instead")
        config.backend = PLATFORM_BACKENDS[platform]
    elif not platform and backend in BACKEND_PLATFORMS:
        config.platform = BACKEND_PLATFORMS[backend]
    elif not platform and backend == "tensorflow":
        guess = _guess(config, model_dir)
        if guess is not None and guess[0] == "tensorflow":
            config.platform = guess[1]
    backend = config.backend
    if backend in KNOWN_PLATFORM_BACKENDS and PLATFORM_BACKENDS.get(config.platform) != backend:
        expected = sorted(p for p, b in PLATFORM_BACKENDS.items() if b == backend)
        raise invalid_arg(
            f"model '{model_name}': platform '{config.platform}' does not match backend "
            f"'{backend}'; expected platform {' or '.join(repr(p) for p in expected)}")
    return backend


def _guess(config: ModelConfig, model_dir: Path | None) -> tuple[str, str] | None:
    """(backend, platform) from default_model_filename, else from the model files."""
    if config.default_model_filename:
        for name, _, backend, platform in _DETECT:
            if name == config.default_model_filename:
                return backend, platform
        return None
    return _detect_from_files(model_dir) if model_dir is not None else None


def _detect(config: ModelConfig, model_name: str, model_dir: Path | None) -> None:
    """Triton's guess for a config naming neither backend nor platform."""
    guess = _guess(config, model_dir)
    if guess is not None:
        config.backend, platform = guess
        if platform:
            config.platform = platform
        return
    if config.default_model_filename:
        raise invalid_arg(f"model '{model_name}': cannot tell the backend from "
                          f"default_model_filename '{config.default_model_filename}'; set "
                          f"'backend' (e.g. backend: \"python\") in config.pbtxt")
    _, dot, suffix = model_name.partition(".")
    if not dot or not suffix:
        raise invalid_arg(
            f"model '{model_name}': the configuration names neither 'backend' nor 'platform' "
            f"and no known model file (model.py, model.onnx, model.pt, model.plan, ...) was "
            f"found; set e.g. backend: \"python\" in config.pbtxt")
    # Triton's custom-backend convention: a model named "x.identity" uses backend "identity".
    config.backend = suffix
    config.default_model_filename = f"model.{suffix}"


def _detect_from_files(model_dir: Path) -> tuple[str, str] | None:
    # Triton inspects only the first version folder (in string order, as it sorts names).
    try:
        versions = sorted(p.name for p in model_dir.iterdir() if p.is_dir())
    except OSError:
        return None
    if not versions:
        return None
    version_dir = model_dir / versions[0]
    for name, must_be_dir, backend, platform in _DETECT:
        entry = version_dir / name
        if not entry.exists():
            continue
        if must_be_dir is None or entry.is_dir() == must_be_dir:
            return backend, platform
    return None
