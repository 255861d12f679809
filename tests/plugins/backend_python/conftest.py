"""Fixtures for the Python backend tests (helpers live in backend_python_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backend_python_helpers import context_for, instance_info, write_model

from naiad_backend_python import PythonBackend, PythonModelInstance

Loader = Callable[..., PythonModelInstance]


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Loader]:
    """``load(name, model_py, config=None, files=None)``: write the model into tmp_path and
    create one instance of it; every instance is closed at the end of the test."""
    backend = PythonBackend()
    made: list[PythonModelInstance] = []

    def _load(name: str, model_py: str, config: str | None = None,
              files: dict[str, str] | None = None, index: int = 0) -> PythonModelInstance:
        model_dir = write_model(tmp_path, name, model_py, config, files=files)
        instance = backend.create_instance(context_for(model_dir), instance_info(name, index))
        made.append(instance)
        return instance

    yield _load
    for instance in made:
        instance.close()
