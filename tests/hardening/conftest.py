"""Fixtures of the hardening tests (helpers: hardening_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hardening_support import hardening_repository

from naiad.testing import ServerProcess, naiad_server


@pytest.fixture(scope="session")
def hardening_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``naiad serve`` in explicit model control with every model loaded: repository
    control is live, so its bad requests reach the body parsers."""
    repo = hardening_repository(tmp_path_factory.mktemp("hardening-repo"))
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=*") as server:
        yield server
