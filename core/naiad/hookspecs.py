"""The plugin contract: every hook naiad calls, with its documentation.

A plugin is a module (or object) with functions named like these hooks and marked with
``naiad.hookimpl``. It is found through one of the entry point groups below and imported only
when a model, a flag or a repository URI first needs it:

==================  ====================================  ===============================
group               key                                   example
==================  ====================================  ===============================
``naiad.backends``  the ``backend:`` name in config.pbtxt ``onnxruntime``, ``python``
``naiad.caches``    the NAME in ``--cache-config NAME,..`` ``local``
``naiad.sources``   the scheme of ``--model-repository``   ``s3``, ``gs``
==================  ====================================  ===============================

Registration hooks are called once, at load time; the request path calls plain methods on the
objects they return and never goes through pluggy. Hooks only ever gain arguments: an
implementation may accept fewer than the specification offers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.scheduling.base import SchedulerFactory
    from naiad.types import Backend, RepositorySource, ResponseCache

PROJECT = "naiad"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- backends ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    """Return a :class:`naiad.types.Backend` for the backend called ``name``, or None.

    ``name`` is the ``backend:`` value of a model's config.pbtxt (after mapping ``platform:``,
    e.g. ``onnxruntime_onnx`` -> ``onnxruntime``). ``backend_config`` holds the KEY=VALUE pairs
    given with ``--backend-config NAME,KEY=VALUE`` for that name. Called once per backend name;
    the first non-None result wins and serves every model of that backend.
    """


# --- scheduling -------------------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    """Return the scheduler factory for a model with this ``config``, or None to pass.

    Called once per model version load. The built-in plugins claim ``ensemble`` models,
    ``sequence_batching``, ``dynamic_batching`` and, last of all, everything else (the
    default scheduler). A third-party scheduler marks its implementation ``tryfirst=True``
    to be asked before them. The first non-None result wins.
    """


# --- response caches --------------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_cache(name: str, settings: dict[str, str]) -> ResponseCache | None:
    """Return a :class:`naiad.types.ResponseCache` for ``--cache-config NAME,KEY=VALUE``.

    ``settings`` holds the KEY=VALUE pairs given for ``name``. The first non-None result wins.
    """


# --- repository sources -----------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_source(scheme: str) -> RepositorySource | None:
    """Return a :class:`naiad.types.RepositorySource` for repository URIs of ``scheme``.

    ``scheme`` is the part of ``--model-repository`` before ``://`` (``s3``, ``gs``), or
    ``file`` for a plain path. The first non-None result wins.
    """
