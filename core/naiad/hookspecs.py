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

The scheduler hook has no group: schedulers are built into the core (see
:func:`naiad_scheduler`).

Registration hooks are called once, at load time; the request path calls plain methods on the
objects they return and never goes through pluggy. Hooks only ever gain arguments: an
implementation may accept fewer than the specification offers.

A plugin imports only naiad's public modules: :mod:`naiad` (``hookimpl``), this one,
:mod:`naiad.types`, :mod:`naiad.errors`, :mod:`naiad.custom_metrics` and
:mod:`naiad.backend_utils`. ``docs/plugin-author-guide.md`` documents each hook with this
module's signatures, and ``tests/core/test_plugin_contract.py`` keeps the two equal.
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

    Called once per model version load. The first non-None result wins. The core's own
    plugins claim ``ensemble`` models, ``sequence_batching``, ``dynamic_batching`` and, last
    of all (``trylast``), everything else (the default scheduler).

    Built in only: there is no entry point group for schedulers, so ``naiad serve`` asks
    nothing else. The factory gets a :class:`naiad.scheduling.base.SchedulingContext` and
    builds a :class:`naiad.scheduling.base.Scheduler`, which records the model's statistics
    and drives its instance workers: core internals that change with the core, not a public
    contract a separately released plugin could rely on. An application that embeds naiad
    may still register an implementation in-process (``PluginManager.register``, with
    ``tryfirst=True`` to be asked before the built-in ones) and pass that manager to
    ``InferenceServer``, accepting that coupling.
    """


# --- response caches --------------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_cache(name: str, settings: dict[str, str]) -> ResponseCache | None:
    """Return a :class:`naiad.types.ResponseCache` for ``--cache-config NAME,KEY=VALUE``, or
    None when ``name`` is not this plugin's cache.

    ``name`` is the cache's entry point name in ``naiad.caches`` (``local``, ``redis``);
    ``settings`` holds the KEY=VALUE pairs given for it (``size=1048576``), as strings: check
    them and raise :class:`naiad.errors.InferenceServerError` naming the bad one. Called at
    start-up, before any model loads. The first non-None result wins.
    """


# --- repository sources -----------------------------------------------------------------


@hookspec(firstresult=True)
def naiad_source(scheme: str) -> RepositorySource | None:
    """Return a :class:`naiad.types.RepositorySource` for repository URIs of ``scheme``.

    ``scheme`` is the part of ``--model-repository`` before ``://`` (``s3``, ``gs``, ``as``),
    or ``file`` for a plain path (the core's own source). Called at start-up, once per
    ``--model-repository``; the source's ``open(uri)`` is called right after, and the core
    mirrors what the repository lists (see :class:`naiad.types.Repository`). The first
    non-None result wins.
    """
