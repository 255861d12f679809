"""Fixtures for the Python backend tests (helpers live in backend_python_helpers.py).

Every test that takes ``backend`` or ``load`` runs in both execution modes: ``isolated``
(a worker process per instance, the default) and ``in_process``. A test that reads the
model object itself (``instance.model``) pins ``execution_mode`` to ``in_process`` with
``backend_python_helpers.in_process_only``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backend_python_helpers import context_for, instance_info, write_model

from naiad.types import InferenceClient, ModelInstance
from naiad_backend_python import PythonBackend

Loader = Callable[..., ModelInstance]


@pytest.fixture(params=["isolated", "in_process"])
def execution_mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def backend(execution_mode: str) -> PythonBackend:
    return PythonBackend({"execution-mode": execution_mode})


@pytest.fixture
def load(tmp_path: Path, backend: PythonBackend) -> Iterator[Loader]:
    """``load(name, model_py, config=None, files=None, index=0, server=None)``: write the
    model into tmp_path and create one instance of it (``server``: what its BLS calls
    reach); every instance is closed at the end of the test."""
    made: list[ModelInstance] = []

    def _load(name: str, model_py: str, config: str | None = None,
              files: dict[str, str] | None = None, index: int = 0,
              server: InferenceClient | None = None) -> ModelInstance:
        model_dir = write_model(tmp_path, name, model_py, config, files=files)
        instance = backend.create_instance(context_for(model_dir, server=server),
                                           instance_info(name, index))
        made.append(instance)
        return instance

    yield _load
    for instance in made:
        instance.close()
