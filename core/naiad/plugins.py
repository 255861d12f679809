"""Finding and loading plugins: the pluggy manager, entry points loaded lazily by name.

A plugin distribution registers a module under one of :data:`ENTRY_POINT_GROUPS`. Nothing is
imported at start-up: the first model that names backend ``onnxruntime`` loads the
``naiad.backends`` entry point called ``onnxruntime`` and nothing else. Operators restrict
what may load with an allow list (``--plugin``) and a block list (``--block-plugin``), both by
entry point name or distribution name.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from naiad import hookspecs, install_hints
from naiad.errors import unavailable
from naiad.scheduling import hookspecs as scheduling_hookspecs

if TYPE_CHECKING:
    import argparse

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.scheduling.base import SchedulerFactory
    from naiad.types import Backend, FrontendFactory, RepositorySource, ResponseCache

log = logging.getLogger("naiad.plugins")

# Schedulers have no group: they are built in (see naiad.scheduling.hookspecs).
ENTRY_POINT_GROUPS = {
    "backend": "naiad.backends",
    "cache": "naiad.caches",
    "source": "naiad.sources",
    # Imported at start-up, every one installed (their flags join `naiad serve`'s).
    "frontend": "naiad.frontends",
}

#: The modules a plugin may import (docs/plugin-author-guide.md documents each); the rest of
#: ``naiad`` is the core's own and may change in any release.
PUBLIC_MODULES = (
    "naiad",
    "naiad.backend_utils",
    "naiad.metrics.custom_metrics",
    "naiad.errors",
    "naiad.hookspecs",
    "naiad.settings",
    "naiad.sockets",
    "naiad.types",
)


# Plugins that ship inside the core, registered through the same hooks as any other.
BUILTIN_PLUGINS = (
    "naiad.repository.local",
    "naiad.scheduling.default",
    "naiad.scheduling.dynamic",
    "naiad.scheduling.ensemble",
    "naiad.scheduling.sequence",
)


@dataclass(frozen=True)
class KnownPlugin:
    """One of naiad's own plugin distributions: what an install hint names."""

    #: the distribution's name on the package index
    distribution: str
    #: its folder in a naiad checkout
    folder: str
    #: the core's extra that pulls it: ``pip install 'naiad[EXTRA]'``
    extra: str

    def install_hint(self) -> str:
        """How to install it from a checkout, a wheel folder and the index (in that order)."""
        return install_hints.install_hint(self.distribution, self.folder, self.extra)


#: naiad's plugin distributions by (kind, entry point name): the backend a config names, the
#: cache ``--cache-config`` names, the URI scheme of ``--model-repository``. The core's
#: pyproject has an extra for each (tests/packaging checks both agree).
KNOWN_PLUGINS = {
    ("backend", "python"): KnownPlugin("naiad-backend-python", "plugins/backend-python",
                                       "python"),
    ("backend", "onnxruntime"): KnownPlugin("naiad-backend-onnx", "plugins/backend-onnx", "onnx"),
    ("backend", "pytorch"): KnownPlugin("naiad-backend-torch", "plugins/backend-torch", "torch"),
    ("backend", "tensorrt"): KnownPlugin("naiad-backend-tensorrt", "plugins/backend-tensorrt",
                                         "tensorrt"),
    ("backend", "fil"): KnownPlugin("naiad-backend-fil", "plugins/backend-fil", "fil"),
    ("backend", "openvino"): KnownPlugin("naiad-backend-openvino", "plugins/backend-openvino",
                                         "openvino"),
    ("backend", "tensorflow"): KnownPlugin("naiad-backend-tensorflow",
                                           "plugins/backend-tensorflow", "tensorflow"),
    ("source", "s3"): KnownPlugin("naiad-source-s3", "plugins/source-s3", "s3"),
    ("source", "gs"): KnownPlugin("naiad-source-gcs", "plugins/source-gcs", "gcs"),
    ("source", "as"): KnownPlugin("naiad-source-azure", "plugins/source-azure", "azure"),
    ("cache", "local"): KnownPlugin("naiad-cache-local", "plugins/cache-local", "local-cache"),
    ("cache", "redis"): KnownPlugin("naiad-cache-redis", "plugins/cache-redis", "redis-cache"),
    ("frontend", "openai"): KnownPlugin("naiad-frontend-openai", "plugins/frontend-openai",
                                        "openai"),
}

#: Triton backends naiad has no plugin for yet (docs/not-supported.md lists them).
BACKENDS_WITHOUT_PLUGIN = ("dali", "vllm", "tensorrtllm")


def install_hint(kind: str, name: str) -> str:
    """What to install for the ``kind`` plugin (backend, cache, source) called ``name``."""
    known = KNOWN_PLUGINS.get((kind, name))
    if known is not None:
        return known.install_hint()
    provide = (f"a distribution with a '{ENTRY_POINT_GROUPS[kind]}' entry point named "
               f"'{name}'")
    if kind == "backend" and name in BACKENDS_WITHOUT_PLUGIN:
        return (f"naiad has no '{name}' backend yet (docs/not-supported.md); {provide} "
                f"would serve it")
    return f"install {provide}"


@dataclass(frozen=True)
class InstalledPlugin:
    """One entry point of an installed distribution (what ``naiad plugins`` lists)."""

    group: str
    name: str
    value: str
    distribution: str
    version: str


def installed_plugins(groups: Sequence[str] | None = None) -> list[InstalledPlugin]:
    """Every entry point in ``groups`` (naiad's plugin groups by default), without importing
    any of them."""
    found = []
    for group in ENTRY_POINT_GROUPS.values() if groups is None else groups:
        for ep in importlib.metadata.entry_points(group=group):
            dist = ep.dist
            found.append(
                InstalledPlugin(
                    group=group,
                    name=ep.name,
                    value=ep.value,
                    distribution=dist.metadata["Name"] if dist else "?",
                    version=dist.version if dist else "?",
                )
            )
    return sorted(found, key=lambda p: (p.group, p.name))


#: tritonserver's default --backend-directory
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"


class PluginManager:
    """naiad's pluggy manager plus lazy entry point loading and the allow/block lists."""

    def __init__(self, allow: list[str] | None = None, block: list[str] | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.add_hookspecs(scheduling_hookspecs)  # the core's own, not public
        if os.environ.get("NAIAD_TRACE_HOOKS"):
            self.pm.trace.root.setwriter(lambda msg: log.info("hook: %s", msg.rstrip()))
            self.pm.enable_tracing()
        self.allow = set(allow) if allow else None
        self.block = set(block or ())
        for module_name in BUILTIN_PLUGINS:
            module = importlib.import_module(module_name)
            self.pm.register(module, name=module_name)
        self._backends: dict[str, Backend] = {}
        #: --backend-directory: where Triton's Python-based backends live
        #: (``<directory>/<backend>/model.py``, served by the ``python`` backend)
        self.backend_directory = Path(DEFAULT_BACKEND_DIRECTORY)
        # Models load on several threads at once: one import and registration per plugin.
        self._loading = threading.RLock()
        self.pm.check_pending()

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin (tests, embedding applications)."""
        self.pm.register(plugin, name=name)
        self.pm.check_pending()

    def _permitted(self, ep: importlib.metadata.EntryPoint) -> bool:
        names = {ep.name}
        if ep.dist is not None:
            names.add(ep.dist.metadata["Name"])
        if names & self.block:
            return False
        return self.allow is None or bool(names & self.allow)

    def _load_entry_point(self, kind: str, name: str) -> bool:
        """Import and register the entry point ``name`` of ``kind`` (once, whichever thread
        asks first); False if none may load."""
        with self._loading:
            return self._load_entry_point_locked(kind, name)

    def _load_entry_point_locked(self, kind: str, name: str) -> bool:
        group = ENTRY_POINT_GROUPS[kind]
        loaded = False
        for ep in importlib.metadata.entry_points(group=group, name=name):
            if not self._permitted(ep):
                log.info("plugin %s:%s is installed but not permitted (--plugin/--block-plugin)",
                         group, name)
                continue
            key = f"{group}:{name}"
            if self.pm.has_plugin(key):  # another thread registered it meanwhile
                loaded = True
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin fails its models, not the server
                dist = ep.dist.metadata["Name"] if ep.dist else ep.value
                raise unavailable(f"plugin '{name}' ({dist}) failed to import: "
                                  f"{type(exc).__name__}: {exc}") from exc
            try:
                self.pm.register(plugin, name=key)
                self.pm.check_pending()
            except pluggy.PluginValidationError as exc:
                if self.pm.is_registered(plugin):
                    self.pm.unregister(plugin)
                dist = ep.dist.metadata["Name"] if ep.dist else ep.value
                raise unavailable(f"plugin '{name}' ({dist}) does not match naiad's hook "
                                  f"specifications: {exc}") from exc
            log.info("loaded plugin %s from %s", key, ep.value)
            loaded = True
        return loaded

    def backend(self, name: str, backend_config: dict[str, str]) -> Backend:
        """The backend called ``name``; loads its plugin the first time it is asked for."""
        found = self._backends.get(name)
        if found is not None:
            return found
        found = self.pm.hook.naiad_backend(name=name, backend_config=backend_config)
        if found is None and self._load_entry_point("backend", name):
            found = self.pm.hook.naiad_backend(name=name, backend_config=backend_config)
        based = self._python_based_backend(name) if found is None else None
        if found is None and name != "python" and based is not None:
            # Triton's Python-based backend: the python backend runs the backend's model.py
            # for every model that names it
            self._load_entry_point("backend", "python")
            found = self.pm.hook.naiad_backend(name=name, backend_config={
                **backend_config, "python-based-backend-file": str(based)})
        if found is None:
            raise unavailable(f"backend '{name}' is not installed or not permitted: "
                              f"{install_hint('backend', name)}")
        self._backends[name] = found
        return found

    def _python_based_backend(self, name: str) -> Path | None:
        """The ``model.py`` of Triton's Python-based backend ``name``: in the backend
        directory (``<dir>/<name>/model.py``), else shipped in a distribution whose
        ``naiad.backends`` entry point ``name`` names a package holding a ``model.py`` (so
        ``pip install`` installs a backend written for Triton, unmodified). None: neither."""
        based = self.backend_directory / name / "model.py"
        if based.is_file():
            return based
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS["backend"],
                                                  name=name):
            if ep.attr or not self._permitted(ep):
                continue
            try:
                spec = importlib.util.find_spec(ep.module)
            except (ImportError, ValueError):
                continue
            folders = list(spec.submodule_search_locations or []) if spec else []
            for folder in folders:
                shipped = Path(folder) / "model.py"
                if shipped.is_file():
                    return shipped
        return None

    def scheduler(self, config: ModelConfig) -> SchedulerFactory:
        """The scheduler factory for a model config: the built-in schedulers, or one an
        embedding application registered in-process (the default scheduler claims the rest)."""
        return self.pm.hook.naiad_scheduler(config=config)  # type: ignore[no-any-return]

    def source(self, scheme: str) -> RepositorySource:
        """The repository source for URIs of ``scheme``; loads its plugin the first time."""
        found = self.pm.hook.naiad_source(scheme=scheme)
        if found is None and self._load_entry_point("source", scheme):
            found = self.pm.hook.naiad_source(scheme=scheme)
        if found is None:
            raise unavailable(f"no repository source for '{scheme}://' is installed or "
                              f"permitted: {install_hint('source', scheme)}")
        return found  # type: ignore[no-any-return]

    def cache(self, name: str, settings: dict[str, str]) -> ResponseCache:
        """The response cache ``--cache-config`` names; loads its plugin the first time."""
        found = self.pm.hook.naiad_cache(name=name, settings=settings)
        if found is None and self._load_entry_point("cache", name):
            found = self.pm.hook.naiad_cache(name=name, settings=settings)
        if found is None:
            raise unavailable(f"no response cache '{name}' is installed or permitted: "
                              f"{install_hint('cache', name)}")
        return found  # type: ignore[no-any-return]

    def load_frontends(self, check_permission: bool = True) -> list[str]:
        """Import and register every installed ``naiad.frontends`` entry point (permitted
        by ``--plugin``/``--block-plugin`` unless not ``check_permission``); the names of
        those that loaded. One that fails to import is logged and left out: the KServe
        frontends still serve."""
        names = []
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS["frontend"]):
            if check_permission and not self._permitted(ep):
                continue
            try:
                with self._loading:
                    if self.pm.has_plugin(f"naiad.frontends:{ep.name}"):
                        names.append(ep.name)
                        continue
                    plugin = ep.load()
                    self.pm.register(plugin, name=f"naiad.frontends:{ep.name}")
                    self.pm.check_pending()
            except Exception as exc:
                log.error("frontend plugin '%s' (%s) cannot be used: %s: %s", ep.name,
                          ep.value, type(exc).__name__, exc)
                continue
            names.append(ep.name)
        return names

    def add_frontend_options(self, parser: argparse.ArgumentParser) -> None:
        """Let every installed frontend add its flags to ``naiad serve``'s ``parser``."""
        self.pm.hook.naiad_frontend_options(parser=parser)

    def frontends(self, options: argparse.Namespace) -> list[FrontendFactory]:
        """The frontends the parsed ``options`` ask for, from the frontend plugins
        :meth:`load_frontends` registered."""
        return [found for found in self.pm.hook.naiad_frontend(options=options)
                if found is not None]
