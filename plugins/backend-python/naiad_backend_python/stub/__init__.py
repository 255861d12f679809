"""The code that runs in a Python model's worker process (and, imported from here, in-process).

The modules here import each other by their top-level names (``import naiad_stub_wire``):
a worker process starts with this folder first on ``sys.path``, under any Python 3.9+ that
has numpy, without ``naiad_backend_python`` installed. Inside the server they are
``naiad_backend_python.stub.<name>``; so that their imports of each other work there too and
each module stays one object under both names, importing this package lets the top-level
names resolve to the package's modules (a finder appended to ``sys.meta_path``: it answers
only for this folder's module names, and only when nothing on ``sys.path`` provides them).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

#: this folder's modules: the top-level names that resolve to them
MODULES = frozenset(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem != "__init__")


class _TopLevelNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import naiad_stub_wire`` inside the server: the package's module, not a copy."""

    def find_spec(self, fullname: str, path: object = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is not None or fullname not in MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(f"{__name__}.{spec.name}")

    def exec_module(self, module: types.ModuleType) -> None:
        """Already executed under its package name."""


if not any(isinstance(finder, _TopLevelNames) for finder in sys.meta_path):
    sys.meta_path.append(_TopLevelNames())
