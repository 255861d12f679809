"""Creating ONNX Runtime sessions: the model file, the session options and the providers.

A model is ``<version>/model.onnx`` (or ``default_model_filename``): a file, or a folder
holding ``model.onnx`` next to its external data files (ONNX Runtime reads those relative to
the model file). Sessions of instances in a group with ``share_session_between_instances``
are created once and shared: ``InferenceSession.run`` is safe to call from several threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import onnxruntime as ort

from naiad.backend_utils import model_file_path
from naiad.errors import unavailable
from naiad_backend_onnx.providers import Provider
from naiad_backend_onnx.settings import SessionSettings

log = logging.getLogger("naiad.backend.onnxruntime")

MODEL_FILENAME = "model.onnx"

# (the load's identity, instance group name, device id): a reload gets sessions of its own.
SessionKey = tuple[int, str, int]


def model_path(version_dir: Path, filename: str, model: str = "") -> Path:
    """The ONNX file of a version: ``filename``, or ``filename/model.onnx`` when
    ``filename`` is a folder (a model with external data), as in Triton. A ``filename``
    that leaves the version folder is refused (INVALID_ARG naming ``model``)."""
    path = model_file_path(version_dir, filename or MODEL_FILENAME,
                           model or version_dir.parent.name)
    if path.is_dir():
        path = path / MODEL_FILENAME
    return path


def session_options(settings: SessionSettings) -> ort.SessionOptions:
    """ONNX Runtime session options for ``settings``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads
    options.inter_op_num_threads = settings.inter_op_threads
    options.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if settings.parallel
                              else ort.ExecutionMode.ORT_SEQUENTIAL)
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, settings.graph_level)
    if settings.enable_mem_arena is not None:
        options.enable_cpu_mem_arena = settings.enable_mem_arena
    if settings.enable_mem_pattern is not None:
        options.enable_mem_pattern = settings.enable_mem_pattern
    for key, value in settings.session_config.items():
        options.add_session_config_entry(key, value)
    return options


def create_session(path: Path, options: ort.SessionOptions, providers: list[Provider],
                   model_name: str) -> ort.InferenceSession:
    """Load ``path`` on ``providers``. Fails, naming the model, when the file is missing or
    not a model ONNX Runtime can load, or when a provider could not be used (ONNX Runtime
    itself would fall back to the CPU without saying so)."""
    if not path.is_file():
        raise unavailable(f"model '{model_name}': unable to find the ONNX model file '{path}'")
    try:
        session = ort.InferenceSession(str(path), sess_options=options,
                                       providers=[name for name, _ in providers],
                                       provider_options=[opts for _, opts in providers])
    except Exception as exc:  # onnxruntime's own exception types: load failures of any kind
        raise unavailable(f"model '{model_name}': onnxruntime could not load '{path}': "
                          f"{type(exc).__name__}: {exc}") from None
    missing = [name for name, _ in providers if name not in session.get_providers()]
    if missing:
        raise unavailable(
            f"model '{model_name}': onnxruntime could not use {', '.join(missing)} for "
            f"'{path}' (it runs on {', '.join(session.get_providers())}); check the GPU "
            f"driver and the CUDA libraries onnxruntime-gpu needs")
    return session


def inspection_session(path: Path, model_name: str) -> ort.InferenceSession:
    """A cheap CPU session for reading a graph's inputs and outputs (auto-complete)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return create_session(path, options, [("CPUExecutionProvider", {})], model_name)


class SharedSessions:
    """Sessions shared by the instances of one group (``share_session_between_instances``),
    kept while an instance uses them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[SessionKey, tuple[ort.InferenceSession, int]] = {}
        self._loading: dict[SessionKey, threading.Lock] = {}
        # The objects whose id() is in a key, kept alive while the key is in use: a freed
        # object's id may be given to another, whose load would get this session.
        self._owners: dict[SessionKey, object] = {}

    def acquire(self, key: SessionKey, create: Callable[[], ort.InferenceSession],
                owner: object = None) -> ort.InferenceSession:
        """The session for ``key``, made with ``create()`` by the first instance to ask;
        ``owner`` (whose ``id()`` the key holds) is kept alive until the last release."""
        with self._lock:
            loading = self._loading.setdefault(key, threading.Lock())
        # Instances load in parallel: one creates the session, the others wait for it.
        with loading:
            with self._lock:
                found = self._sessions.get(key)
                if found is not None:
                    self._sessions[key] = (found[0], found[1] + 1)
                    log.info("reusing the onnxruntime session of instance group '%s'", key[1])
                    return found[0]
            session = create()
            with self._lock:
                self._sessions[key] = (session, 1)
                self._owners[key] = owner
            return session

    def release(self, key: SessionKey) -> None:
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                return
            if found[1] <= 1:
                del self._sessions[key]
                self._loading.pop(key, None)
                self._owners.pop(key, None)
            else:
                self._sessions[key] = (found[0], found[1] - 1)
