"""Unit tests of naiad.plugins: in-process plugins, lazy entry points, allow/block lists and
the errors a missing or broken plugin gives (no server process, no pip install)."""

from __future__ import annotations

import importlib.metadata
import sys
import time
import types
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pluggy
import pytest

import naiad
from naiad.errors import InferenceServerError, Status
from naiad.plugins import (
    BACKENDS_WITHOUT_PLUGIN,
    ENTRY_POINT_GROUPS,
    KNOWN_PLUGINS,
    PluginManager,
    installed_plugins,
)
from naiad.repository.local import LocalRepository
from naiad.types import Backend, ModelInstance, RepositorySource, ResponseCache


class TinyInstance(ModelInstance):
    def execute(self, requests):
        return []


class TinyBackend(Backend):
    name = "tiny"

    def __init__(self, backend_config: dict[str, str]) -> None:
        self.backend_config = backend_config

    def create_instance(self, context, instance):
        return TinyInstance()


class TinyPlugin:
    """An in-process plugin: claims backend ``tiny`` and counts how often it is asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @naiad.hookimpl
    def naiad_backend(self, name: str, backend_config: dict[str, str]) -> Backend | None:
        self.calls.append(name)
        return TinyBackend(backend_config) if name == "tiny" else None


def unavailable(call, *fragments: str) -> str:
    with pytest.raises(InferenceServerError) as info:
        call()
    assert info.value.status is Status.UNAVAILABLE
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value.message


# --- fake installed distributions -----------------------------------------------------------


def fake_distribution(root: Path, dist_name: str, entry_points: dict[str, dict[str, str]]
                      ) -> None:
    """A ``.dist-info`` folder under ``root`` declaring ``entry_points`` {group: {name: value}}."""
    info = root / f"{dist_name.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.2.3\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in eps.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Replace the installed entry points with fake distributions under tmp_path; returns a
    function ``add(dist_name, {group: {name: value}})``."""
    root = tmp_path / "site"
    root.mkdir()

    def entry_points(**selection):
        found = [ep for dist in importlib.metadata.distributions(path=[str(root)])
                 for ep in dist.entry_points]
        return importlib.metadata.EntryPoints(found).select(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return lambda dist_name, eps: fake_distribution(root, dist_name, eps)


def plugin_module(monkeypatch, backend_name: str) -> tuple[str, list[str]]:
    """A module (only in sys.modules) claiming ``backend_name``; returns its name and a list
    that records every hook call."""
    module_name = f"naiad_unit_plugin_{uuid.uuid4().hex}"
    module = types.ModuleType(module_name)
    calls: list[str] = []

    @naiad.hookimpl
    def naiad_backend(name, backend_config):
        calls.append(name)
        return TinyBackend(backend_config) if name == backend_name else None

    module.naiad_backend = naiad_backend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module_name, module)
    return module_name, calls


# --- in-process plugins ---------------------------------------------------------------------


def test_registered_plugin_serves_its_backend_with_backend_config():
    pm = PluginManager()
    plugin = TinyPlugin()
    pm.register(plugin, name="tiny")
    backend = pm.backend("tiny", {"threads": "2"})
    assert isinstance(backend, TinyBackend)
    assert backend.backend_config == {"threads": "2"}


def test_backend_is_created_once_and_cached():
    pm = PluginManager()
    plugin = TinyPlugin()
    pm.register(plugin)
    first = pm.backend("tiny", {})
    assert pm.backend("tiny", {}) is first
    assert plugin.calls == ["tiny"]


def test_register_rejects_a_misspelled_hook_loudly():
    class Misspelled:
        @naiad.hookimpl
        def naiad_backnd(self, name):
            return None

    with pytest.raises(pluggy.PluginValidationError):
        PluginManager().register(Misspelled())


def test_builtin_plugins_serve_local_repositories(tmp_path):
    source = PluginManager().source("file")
    assert isinstance(source, RepositorySource)
    assert source.open(str(tmp_path)).local_path == tmp_path.resolve()


# --- not installed --------------------------------------------------------------------------


def test_every_first_party_backend_has_a_distribution():
    backends = {name: plugin.distribution for (kind, name), plugin in KNOWN_PLUGINS.items()
                if kind == "backend"}
    assert backends == {"onnxruntime": "naiad-backend-onnx", "pytorch": "naiad-backend-torch",
                        "tensorrt": "naiad-backend-tensorrt", "python": "naiad-backend-python",
                        "fil": "naiad-backend-fil", "openvino": "naiad-backend-openvino",
                        "tensorflow": "naiad-backend-tensorflow"}


def load_missing(pm: PluginManager, kind: str, name: str) -> None:
    if kind == "backend":
        pm.backend(name, {})
    elif kind == "cache":
        pm.cache(name, {})
    else:
        pm.source(name)


# Frontends are not asked for by name (every installed one starts): no "missing" to say.
@pytest.mark.parametrize(("kind", "name"), sorted(k for k in KNOWN_PLUGINS if k[0] != "frontend"))
def test_missing_first_party_plugin_says_how_to_install_it_both_ways(installed, kind, name):
    plugin = KNOWN_PLUGINS[(kind, name)]
    message = unavailable(lambda: load_missing(PluginManager(), kind, name), f"'{name}",
                          "installed", f"pip install {plugin.distribution}",
                          f"pip install 'naiad[{plugin.extra}]'",
                          f"naiad checkout ({Path(__file__).parents[2]}): pip install "
                          f"./{plugin.folder}")
    assert (Path(__file__).parents[2] / plugin.folder / "pyproject.toml").is_file(), message


def test_unknown_backend_not_installed_names_the_entry_point_to_provide(installed):
    message = unavailable(lambda: PluginManager().backend("mystery", {}),
                          "backend 'mystery'", "'naiad.backends' entry point named 'mystery'")
    assert "pip install" not in message


@pytest.mark.parametrize("backend", BACKENDS_WITHOUT_PLUGIN)
def test_triton_backend_naiad_lacks_points_to_the_not_supported_list(installed, backend):
    unavailable(lambda: PluginManager().backend(backend, {}), f"naiad has no '{backend}' "
                "backend yet (docs/not-supported.md)", f"entry point named '{backend}'")


def test_unknown_cache_and_source_name_the_entry_point_to_provide(installed):
    pm = PluginManager()
    unavailable(lambda: pm.cache("memcached", {}), "'memcached'",
                "'naiad.caches' entry point named 'memcached'")
    unavailable(lambda: pm.source("hdfs"), "'hdfs://'",
                "'naiad.sources' entry point named 'hdfs'")


# --- entry points, allow and block lists ----------------------------------------------------


def test_entry_point_is_loaded_only_for_its_name(installed, monkeypatch):
    module_name, calls = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    pm = PluginManager()
    unavailable(lambda: pm.backend("other", {}), "backend 'other'")
    assert not pm.pm.has_plugin("naiad.backends:tiny")
    assert calls == []
    assert isinstance(pm.backend("tiny", {}), TinyBackend)
    assert pm.pm.has_plugin("naiad.backends:tiny")
    assert calls == ["tiny"]


def test_threads_asking_for_a_new_backend_at_once_all_get_it(installed, monkeypatch):
    # Models load on several threads; the first request for a backend imports its plugin.
    # A slow import widens the window in which a second thread asks for the same name.
    module_name, _ = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    real_load = importlib.metadata.EntryPoint.load

    def slow_load(self):
        time.sleep(0.05)
        return real_load(self)

    monkeypatch.setattr(importlib.metadata.EntryPoint, "load", slow_load)
    pm = PluginManager()
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: pm.backend("tiny", {}), range(4)))
    assert all(isinstance(backend, TinyBackend) for backend in found)


def test_cache_and_source_entry_points(installed, monkeypatch):
    module_name = f"naiad_unit_plugin_{uuid.uuid4().hex}"
    module = types.ModuleType(module_name)

    class Cache(ResponseCache):
        def lookup(self, key):
            return None

        def insert(self, key, response):
            pass

    class Source(RepositorySource):
        def open(self, uri):
            return LocalRepository(Path("/"))

    @naiad.hookimpl
    def naiad_cache(name, settings):
        return Cache() if name == "mem" else None

    @naiad.hookimpl
    def naiad_source(scheme):
        return Source() if scheme == "mem" else None

    module.naiad_cache = naiad_cache  # type: ignore[attr-defined]
    module.naiad_source = naiad_source  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module_name, module)
    installed("naiad-mem", {"naiad.caches": {"mem": module_name},
                            "naiad.sources": {"mem": module_name}})
    pm = PluginManager()
    assert isinstance(pm.cache("mem", {}), Cache)
    assert isinstance(pm.source("mem"), Source)


@pytest.mark.parametrize("allow", [["tiny"], ["naiad-backend-tiny"], ["other", "tiny"]])
def test_allow_list_by_entry_point_or_distribution_name(installed, monkeypatch, allow):
    module_name, _ = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    assert isinstance(PluginManager(allow=allow).backend("tiny", {}), TinyBackend)


def test_plugin_outside_the_allow_list_is_not_loaded(installed, monkeypatch):
    module_name, calls = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    pm = PluginManager(allow=["naiad-backend-onnx"])
    unavailable(lambda: pm.backend("tiny", {}), "backend 'tiny'", "not permitted")
    assert calls == []


@pytest.mark.parametrize("block", [["tiny"], ["naiad-backend-tiny"]])
def test_block_list_by_entry_point_or_distribution_name(installed, monkeypatch, block):
    module_name, calls = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    pm = PluginManager(block=block)
    unavailable(lambda: pm.backend("tiny", {}), "backend 'tiny'", "not permitted")
    assert calls == []


def test_block_list_wins_over_allow_list(installed, monkeypatch):
    module_name, _ = plugin_module(monkeypatch, "tiny")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": module_name}})
    pm = PluginManager(allow=["tiny"], block=["naiad-backend-tiny"])
    unavailable(lambda: pm.backend("tiny", {}), "backend 'tiny'")


def test_block_list_leaves_other_plugins_alone(installed, monkeypatch):
    tiny, _ = plugin_module(monkeypatch, "tiny")
    other, _ = plugin_module(monkeypatch, "other")
    installed("naiad-backend-tiny", {"naiad.backends": {"tiny": tiny}})
    installed("naiad-backend-other", {"naiad.backends": {"other": other}})
    pm = PluginManager(block=["naiad-backend-tiny"])
    assert isinstance(pm.backend("other", {}), TinyBackend)


def test_real_python_backend_can_be_blocked():
    message = unavailable(lambda: PluginManager(block=["python"]).backend("python", {}),
                          "backend 'python'")
    assert "pip install naiad-backend-python" in message
    assert "pip install ./plugins/backend-python" in message


# --- broken plugins -------------------------------------------------------------------------


def test_plugin_whose_import_raises_is_unavailable_naming_it(installed, tmp_path, monkeypatch):
    module_name = f"naiad_unit_broken_{uuid.uuid4().hex}"
    (tmp_path / f"{module_name}.py").write_text("raise RuntimeError('no GPU driver found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed("naiad-backend-broken", {"naiad.backends": {"broken": module_name}})
    pm = PluginManager()
    unavailable(lambda: pm.backend("broken", {}), "plugin 'broken'", "naiad-backend-broken",
                "failed to import", "RuntimeError: no GPU driver found")
    # the failure is not remembered as success: asking again fails the same way
    unavailable(lambda: pm.backend("broken", {}), "failed to import")


def test_plugin_whose_module_is_missing_is_unavailable(installed):
    installed("naiad-backend-ghost", {"naiad.backends": {"ghost": "naiad_unit_no_such_module"}})
    unavailable(lambda: PluginManager().backend("ghost", {}), "plugin 'ghost'",
                "naiad-backend-ghost", "ModuleNotFoundError")


def test_plugin_with_invalid_hook_is_unavailable_naming_it(installed, monkeypatch):
    module_name = f"naiad_unit_invalid_{uuid.uuid4().hex}"
    module = types.ModuleType(module_name)

    @naiad.hookimpl
    def naiad_backend(name, backend_config, gpu_count):
        return None

    module.naiad_backend = naiad_backend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module_name, module)
    installed("naiad-backend-invalid", {"naiad.backends": {"invalid": module_name}})
    unavailable(lambda: PluginManager().backend("invalid", {}), "plugin 'invalid'",
                "naiad-backend-invalid")


# --- installed_plugins ----------------------------------------------------------------------


def test_installed_plugins_lists_the_python_backend():
    found = [p for p in installed_plugins() if p.name == "python"]
    assert len(found) == 1
    plugin = found[0]
    assert plugin.group == "naiad.backends"
    assert plugin.distribution == "naiad-backend-python"
    assert plugin.value == "naiad_backend_python.plugin"
    assert plugin.version == importlib.metadata.version("naiad-backend-python")


def test_installed_plugins_are_sorted_and_not_imported(installed):
    installed("naiad-zoo", {"naiad.sources": {"s3": "naiad_unit_never_imported_a"},
                            "naiad.backends": {"zz": "naiad_unit_never_imported_b",
                                               "aa": "naiad_unit_never_imported_c"},
                            "naiad.caches": {"local": "naiad_unit_never_imported_d"},
                            "other.group": {"x": "naiad_unit_never_imported_e"}})
    listed = [(p.group, p.name, p.distribution, p.version) for p in installed_plugins()]
    assert listed == [("naiad.backends", "aa", "naiad-zoo", "1.2.3"),
                      ("naiad.backends", "zz", "naiad-zoo", "1.2.3"),
                      ("naiad.caches", "local", "naiad-zoo", "1.2.3"),
                      ("naiad.sources", "s3", "naiad-zoo", "1.2.3")]
    assert not any(name.startswith("naiad_unit_never_imported") for name in sys.modules)


def test_installed_plugins_tolerate_entry_points_without_distribution(monkeypatch):
    ep = importlib.metadata.EntryPoint("bare", "naiad_unit_bare", "naiad.backends")

    def entry_points(**selection):
        return importlib.metadata.EntryPoints([ep]).select(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert [(p.name, p.distribution, p.version) for p in installed_plugins()] == [
        ("bare", "?", "?")]


def test_entry_point_groups():
    assert ENTRY_POINT_GROUPS == {"backend": "naiad.backends", "cache": "naiad.caches",
                                  "source": "naiad.sources", "frontend": "naiad.frontends"}
