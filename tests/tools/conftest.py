"""Fixtures of the client tools' tests (naiad perf): the models perf_analyzer's own tests
serve, on naiad and on the real Triton 2.51, and the real perf_analyzer.

The repository and the helpers are the existing ones: tests/compat's model repository with
tests/core/test_perf_analyzer.py's sequence model, tests/compat's Triton start-up
(``triton_serve_script``, skipping with the reason when Triton cannot be set up) and
tests/core/perf_analyzer_tool.py.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS / "core", TESTS / "compat"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from compat_peer import (  # noqa: E402
    START_TIMEOUT,
    TRITON_PEER_DIR,
    compat_server,
    triton_cmd,
    triton_serve_script,  # noqa: F401 - the fixture, for tests/tools
)
from perf_analyzer_tool import PerfAnalyzer, find_or_set_up  # noqa: E402
from test_perf_analyzer import ACCUMULATE_CONFIG, ACCUMULATE_PY, COMPAT_MODELS  # noqa: E402
from zoo import write_model  # noqa: E402

from naiad.testing import ServerProcess, naiad_server  # noqa: E402

# The models naiad perf drives: plain, batching, BYTES, decoupled, sequence.
PERF_MODELS = ("add_sub", "identity_batch", "strings", "repeat")


@pytest.fixture(scope="session")
def perf_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("perf-models")
    for name in PERF_MODELS:
        shutil.copytree(COMPAT_MODELS / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    write_model(repo, "accumulate", ACCUMULATE_CONFIG, ACCUMULATE_PY)
    return repo


@pytest.fixture(scope="session")
def perf_server(perf_repo: Path) -> Iterator[ServerProcess]:
    """naiad serve on the perf models."""
    with naiad_server("--model-repository", str(perf_repo)) as process:
        yield process


@pytest.fixture(scope="session")
def triton_perf_server(perf_repo: Path,
                       triton_serve_script: Path) -> Iterator[ServerProcess]:  # noqa: F811
    """The real tritonserver 2.51 on the same models (skips when it cannot be set up)."""
    server = compat_server(triton_cmd(triton_serve_script, [], perf_repo),
                           (*PERF_MODELS, "accumulate"),
                           env={"TRITON_PEER_DIR": str(TRITON_PEER_DIR)},
                           ready_timeout=START_TIMEOUT)
    with server:
        yield server


@pytest.fixture(scope="session")
def perf_analyzer() -> PerfAnalyzer:
    return find_or_set_up()
