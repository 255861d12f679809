"""Importing a model's ``model.py``, the way Triton's stub imports it.

Triton runs each model instance in its own process, appends the version folder and the model
folder to ``sys.path`` and imports ``<version>.model``. A naiad worker process does the same
with this module; in-process mode imports every model into the server's interpreter, so each
import gets a unique package name (``_naiad_python_model_<n>``, whose
``__path__`` is the version folder: ``from . import helper`` works as in Triton) and the two
folders are appended to ``sys.path`` (``import helper`` works as in Triton).

Two models that both ship ``helper.py`` must not see each other's: while a model file runs
its top-level imports, :class:`_ModelFinder` resolves the names its own folders provide to its
own files, and modules another model imported from its folders are hidden from
``sys.modules``. Names the standard library or site-packages provide still win, as they do in
Triton (its folders come last on ``sys.path``). A sibling imported lazily (inside
``execute``) is whichever copy was imported first: the one limit of sharing an interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import shutil
import sys
import tempfile
import threading
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PACKAGE_PREFIX = "_naiad_python_model_"

_lock = threading.Lock()
_counter = itertools.count()
# Every folder a Python model was imported from (version and model folders).
_model_folders: set[str] = set()
_active = threading.local()


class _ModelFinder(importlib.abc.MetaPathFinder):
    """Resolves top-level imports to the importing model's own folders (see module doc)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        folders = getattr(_active, "folders", None)
        if folders is None or path is not None or fullname in sys.builtin_module_names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, folders)
        if spec is None:
            return None
        elsewhere = [p for p in sys.path if p not in _model_folders]
        if importlib.machinery.PathFinder.find_spec(fullname, elsewhere) is not None:
            return None  # the standard library or site-packages comes first, as in Triton
        return spec


_finder = _ModelFinder()


def import_model(model_file: str | Path) -> types.ModuleType:
    """Execute ``model_file`` as a new module and return it. Its folder and the folder above
    (a model's folder; not a Python-based backend's backend directory) are appended to
    ``sys.path``. Exceptions from the model's code propagate."""
    model_file = Path(model_file)
    version_dir = model_file.parent
    folders = [str(version_dir), str(version_dir.parent)]
    if not version_dir.name.isdigit():
        # A Python-based backend's model.py (<backend directory>/<name>/model.py): the
        # folder above is the backend directory, whose folders would shadow installed
        # packages of the same name ("vllm" for vllm/model.py's "import vllm").
        folders = folders[:1]
    with _lock:
        package_name = f"{PACKAGE_PREFIX}{next(_counter)}"
        package = types.ModuleType(package_name)
        package.__path__ = [folders[0]]
        package.__package__ = package_name
        package.__spec__ = importlib.machinery.ModuleSpec(package_name, None, is_package=True)
        package.__spec__.submodule_search_locations = [folders[0]]
        spec = importlib.util.spec_from_file_location(f"{package_name}.{model_file.stem}",
                                                      model_file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {model_file}")
        module = importlib.util.module_from_spec(spec)
        _importable_alias(package_name, folders[0])
        sys.modules[package_name] = package
        sys.modules[spec.name] = module
        try:
            with _isolated(folders):
                spec.loader.exec_module(module)
        except BaseException:
            forget_model(module)
            raise
        return module


_alias_dir: str | None = None


def _importable_alias(package_name: str, version_dir: str) -> None:
    """A folder on ``sys.path`` where ``package_name`` names the version folder, so that a
    process the model starts with multiprocessing's spawn (which imports the model's
    modules by name, as PyTriton's proxy model does for its tensor store) finds them too.
    The folder is this process's own and goes when it exits."""
    global _alias_dir
    if _alias_dir is None:
        _alias_dir = tempfile.mkdtemp(prefix=f"naiad-models-{os.getpid()}-")
        atexit.register(shutil.rmtree, _alias_dir, True)
        sys.path.append(_alias_dir)
    with contextlib.suppress(OSError):
        os.symlink(version_dir, os.path.join(_alias_dir, package_name))


def forget_model(module: types.ModuleType) -> None:
    """Drop a module made by :func:`import_model` (and its package's submodules)."""
    package_name = module.__name__.rpartition(".")[0]
    if not package_name.startswith(PACKAGE_PREFIX):
        return
    # list(): a copy made without giving up the GIL, for other threads of an in-process
    # server import while this runs (iterating sys.modules itself failed with "dictionary
    # changed size during iteration" when 32 threads loaded and unloaded models).
    for name in [n for n in list(sys.modules)
                 if n == package_name or n.startswith(package_name + ".")]:
        sys.modules.pop(name, None)
    if _alias_dir is not None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(_alias_dir, package_name))


@contextmanager
def _isolated(folders: list[str]) -> Iterator[None]:
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
        _model_folders.add(folder)
    hidden = _hide_other_models(folders)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _active.folders = folders
    try:
        yield
    finally:
        _active.folders = None
        for name, module in hidden.items():
            sys.modules[name] = module


def _hide_other_models(folders: list[str]) -> dict[str, types.ModuleType]:
    """Take out of ``sys.modules`` the modules other models imported from their folders
    under a top-level name that ``folders`` also provide; return them for restoring."""
    provided = _top_level_names(folders)
    others = tuple(f + os.sep for f in _model_folders if f not in folders)
    own = tuple(f + os.sep for f in folders)
    hidden = {}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in provided:
            continue
        file = getattr(module, "__file__", None) or ""
        if file.startswith(others) and not file.startswith(own):
            hidden[name] = sys.modules.pop(name)
    return hidden


def _top_level_names(folders: list[str]) -> set[str]:
    """Module and package names importable from ``folders`` (``helper.py`` -> ``helper``)."""
    names = set()
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            stem = entry.partition(".")[0]
            if stem.isidentifier() and (entry.endswith((".py", ".pyc", ".so", ".pyd"))
                                        or "." not in entry):
                names.add(stem)
    return names
