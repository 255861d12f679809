"""Fixtures shared by every test tree: model repositories and real server processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from zoo import standard_repository

from naiad.testing import ServerProcess, naiad_server


@pytest.fixture(scope="session")
def standard_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of Triton Python models (see tests/zoo.py), two of them broken."""
    return standard_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def server(standard_repo: Path) -> Iterator[ServerProcess]:
    """``naiad serve`` on the standard repository, shared by the whole session. Broken models
    must not stop the others (--exit-on-error=false) nor hold readiness back
    (--strict-readiness=false)."""
    with naiad_server("--model-repository", str(standard_repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process
