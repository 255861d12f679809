"""Fixtures of the Triton differential suite: the real tritonserver and naiad, same repository.

Every test module gets its own pair of server processes (module scope), started side by side
on ``tests/compat/model_repository`` (or the module's ``COMPAT_MODEL_REPOSITORY``) with the
module's ``COMPAT_SERVER_ARGS`` (default: none)
plus ``--exit-on-error=false`` (the repository holds two models that fail to load on purpose).
A module that names ``COMPAT_MODELS`` gets a copy of the repository with only those models.
Each test sends the same requests to both and compares the answers, so per-module statistics
and metrics match as long as every test talks to both servers.

Environment:
  TRITON_PEER_DIR        where setup.sh unpacks tritonserver
                         (default <tempdir>/naiad-triton-reference)
  NAIAD_TRITON_SCRIPTS   folder of setup.sh / serve.sh (default <repo>/../shared/triton)
  NAIAD_REQUIRE_TRITON=1 fail instead of skipping when the Triton peer cannot be set up
  NAIAD_COMPAT_PEER=triton  serve the "naiad" side with a second tritonserver: a self-test of the
                         comparison logic (every test must pass; naiad-only checks are off)
  NAIAD_COMPAT_NAIAD_ARGS="--frontend-processes 2"  more flags for naiad only (split on spaces)
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # compat_helpers, also under --import-mode=importlib
    sys.path.insert(0, str(HERE))

from compat_helpers import GOOD_MODELS, MODEL_REPOSITORY, model_subset  # noqa: E402
from compat_peer import (  # noqa: E402
    NO_SCRIPTS,
    SELF_TEST,
    START_TIMEOUT,
    TRITON_PEER_DIR,
    TRITON_SCRIPTS,
    Pair,
    compat_server,
    naiad_cmd,
    triton_cmd,
    triton_serve_script,  # noqa: F401 - the fixture, defined with the peer's setup
)


@pytest.hookimpl(optionalhook=True)
def pytest_naiad_skip_reasons(config: pytest.Config) -> list[tuple[str, str]]:
    """Said before the run (the root conftest.py): without Triton's scripts the suite skips."""
    scripts = (TRITON_SCRIPTS / "serve.sh", TRITON_SCRIPTS / "setup.sh")
    if all(path.exists() for path in scripts) or os.environ.get("NAIAD_REQUIRE_TRITON") == "1":
        return []
    return [("triton_serve_script", f"Triton compat suite skipped: {NO_SCRIPTS}")]


@pytest.fixture(scope="module")
def servers(request: pytest.FixtureRequest, triton_serve_script: Path,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Any:
    args = list(getattr(request.module, "COMPAT_SERVER_ARGS", []))
    repository = Path(getattr(request.module, "COMPAT_MODEL_REPOSITORY", MODEL_REPOSITORY))
    expect = tuple(getattr(request.module, "COMPAT_EXPECT_READY", GOOD_MODELS))
    models = getattr(request.module, "COMPAT_MODELS", None)
    if models is not None:
        repository = model_subset(repository, tuple(models),
                                  tmp_path_factory.mktemp("compat-models"))
        expect = tuple(name for name in expect if name in models)
    env = {"TRITON_PEER_DIR": str(TRITON_PEER_DIR)}
    triton = compat_server(
        triton_cmd(triton_serve_script, args, repository), expect, env=env,
        ready_timeout=START_TIMEOUT
    )
    if SELF_TEST:
        naiad = compat_server(
            triton_cmd(triton_serve_script, args, repository), expect, env=env,
            ready_timeout=START_TIMEOUT
        )
    else:
        naiad = compat_server(naiad_cmd(args, repository), expect, ready_timeout=START_TIMEOUT)

    errors: dict[str, BaseException] = {}

    def start(name: str, server: Any) -> None:
        try:
            server.start()
        except BaseException as exc:
            errors[name] = exc

    threads = [
        threading.Thread(target=start, args=(n, s))
        for n, s in (("triton", triton), ("naiad", naiad))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if "triton" in errors:
            # The peer is installed (triton_serve_script): a start that fails is the
            # repository's or the arguments' fault, and must not switch the suite off.
            pytest.fail(f"tritonserver did not start: {errors['triton']}"[:3000],
                        pytrace=False)
        if "naiad" in errors:
            pytest.fail(f"naiad did not start: {errors['naiad']}"[:5000], pytrace=False)
        yield Pair(triton, naiad, SELF_TEST)
    finally:
        stoppers = [threading.Thread(target=s.stop) for s in (triton, naiad)]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()


@pytest.fixture(scope="module")
def triton(servers: Pair) -> Any:
    """The real tritonserver (a naiad.testing.ServerProcess) on the compat repository."""
    return servers.triton


@pytest.fixture(scope="module")
def naiad(servers: Pair) -> Any:
    """naiad on the same repository (or a second tritonserver with NAIAD_COMPAT_PEER=triton)."""
    return servers.naiad


@pytest.fixture(scope="module")
def strict(servers: Pair) -> bool:
    """True when the naiad-only checks apply (4xx for Triton's 500s, messages naming the model)."""
    return not servers.naiad_is_triton
