"""Shared by every test tree: the test processes' signal set-up, model repositories and real
server processes."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from zoo import standard_repository

from naiad.testing import ServerProcess, naiad_server


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT as Python's default in every pytest process, however the suite was started.
    A shell starts a background job (``scripts/test &``) with SIGINT ignored, every process
    a test starts inherits that, and a test that stops its servers with SIGINT, as
    PyTriton's examples and functional tests do, waits for them in vain."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
