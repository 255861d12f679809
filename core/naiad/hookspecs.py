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
``naiad.frontends`` the frontend's name                    ``openai``
==================  ====================================  ===============================

Frontend plugins are the exception to loading on demand: ``naiad serve`` imports every
installed ``naiad.frontends`` entry point when it builds its flags (so ``--help`` lists them),
which is why such a module must import nothing heavy at the top (transformers, torch: import
them when the frontend starts).

The scheduler hook is not here: schedulers are built into the core and drive its instance
workers, so their hook is the core's own (:mod:`naiad.scheduling.hookspecs`), with no group.

Registration hooks are called once, at load time; the request path calls plain methods on the
objects they return and never goes through pluggy. Hooks only ever gain arguments: an
implementation may accept fewer than the specification offers.

A plugin imports only naiad's public modules: :mod:`naiad` (``hookimpl``), this one,
:mod:`naiad.types`, :mod:`naiad.errors`, :mod:`naiad.metrics.custom_metrics` and
:mod:`naiad.backend_utils`. ``docs/plugin-author-guide.md`` documents each hook with this
module's signatures, and ``tests/core/test_plugin_contract.py`` keeps the two equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import argparse

    from naiad.types import Backend, FrontendFactory, RepositorySource, ResponseCache

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


# --- frontends --------------------------------------------------------------------------


@hookspec
def naiad_frontend_options(parser: argparse.ArgumentParser) -> None:
    """Add this frontend's flags to ``naiad serve`` (as ``pytest_addoption`` does).

    ``parser`` is the ``serve`` subcommand's parser: add an argument group of your own
    (``parser.add_argument_group("OpenAI frontend")``) and flags whose names cannot clash
    with tritonserver's (prefix them with the frontend's name, ``--openai-port``). Called
    once per process, before the command line is parsed, for every installed frontend.
    """


@hookspec
def naiad_frontend(options: argparse.Namespace) -> FrontendFactory | None:
    """Return the frontend to start for the parsed ``naiad serve`` ``options``, or None
    when they ask for none (``--allow-openai=false``).

    The factory is called with a :class:`naiad.types.FrontendContext` once the server's core
    exists, before the start-up models load; the frontend it builds is started beside the
    HTTP, gRPC and metrics listeners and stopped after the requests in flight have drained.
    Every frontend's result is used (not first-result). A frontend must not assume it is
    the only process serving: bind listening sockets with ``SO_REUSEPORT``.
    """
