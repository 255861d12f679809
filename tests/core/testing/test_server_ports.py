"""naiad.testing's ServerProcess gives every ``naiad serve`` it starts a free port of its own
for each installed frontend plugin the command turns on, so that test servers never contend
for 9000."""

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


def test_a_naiad_server_gets_a_free_openai_port_when_it_serves_the_api() -> None:
    if "--openai-port" not in installed_frontend_port_flags():
        pytest.skip("naiad-frontend-openai is not installed")
    serve = [sys.executable, "-m", "naiad", "serve"]
    assert ServerProcess(serve).cmd == serve  # the OpenAI API is off unless asked for
    for on in (["--allow-openai"], ["--allow-openai=true"], ["--allow-openai", "yes"],
               ["--allow-openai", "--x"], ["--allow-openai=false", "--allow-openai"]):
        process = ServerProcess([*serve, *on])
        assert process.cmd == [*serve, *on, f"--openai-port={process.openai_port}"], on
    for off in (["--allow-openai=false"], ["--allow-openai", "no"],
                ["--allow-openai", "--allow-openai=0"]):
        assert ServerProcess([*serve, *off]).cmd == [*serve, *off], off
    on = [*serve, "--allow-openai"]
    assert ServerProcess([*on, "--openai-port", "1234"]).cmd == [*on, "--openai-port", "1234"]
    assert ServerProcess([*on, "--openai-port=1234"]).cmd == [*on, "--openai-port=1234"]
    assert ServerProcess(["tritonserver", "--allow-openai"]).cmd == ["tritonserver",
                                                                    "--allow-openai"]
