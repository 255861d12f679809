"""naiad.testing's ServerProcess gives every ``naiad serve`` it starts a free port of its own
for each installed frontend plugin, so that test servers never contend for 9000."""

from __future__ import annotations

import sys

import pytest

from naiad.testing import ServerProcess
from naiad.testing.server import installed_frontend_port_flags, runs_naiad_serve


def test_naiad_serve_commands_are_told_apart_from_others() -> None:
    assert runs_naiad_serve([sys.executable, "-m", "naiad", "serve", "--x"])
    assert runs_naiad_serve(["/opt/naiad/bin/naiad", "serve"])
    assert not runs_naiad_serve(["tritonserver", "--model-repository", "serve"])
    assert not runs_naiad_serve([sys.executable, "-m", "naiad", "plugins"])


def test_a_naiad_server_gets_a_free_openai_port_unless_it_names_one() -> None:
    if "--openai-port" not in installed_frontend_port_flags():
        pytest.skip("naiad-frontend-openai is not installed")
    serve = [sys.executable, "-m", "naiad", "serve"]
    process = ServerProcess(serve)
    assert process.cmd == [*serve, f"--openai-port={process.openai_port}"]
    assert ServerProcess([*serve, "--openai-port", "1234"]).cmd == [
        *serve, "--openai-port", "1234"]
    assert ServerProcess([*serve, "--openai-port=1234"]).cmd == [*serve, "--openai-port=1234"]
    assert ServerProcess(["tritonserver"]).cmd == ["tritonserver"]
