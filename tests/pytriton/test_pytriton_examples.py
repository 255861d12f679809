"""PyTriton 0.7's CPU examples, unmodified but for their imports, served by naiad: each
example's server scripts and client run as PyTriton's functional test runs them, and that
test's own ``verify_client_output`` judges the client's output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from upstream import load_functional_test, run_example, upstream_copy

# example folder, functional test, client, servers; long: run on demand (pytest -m long).
# By default the remote-mode example only (Triton with its access token and two RemoteTriton
# binders); the others' features are covered by default in test_pytriton_lifecycle.py and
# test_pytriton_unit.py.
EXAMPLES = [
    pytest.param("add_sub_python", "L0_example_add_sub_python", "client.py", ["server.py"],
                 id="add_sub_python", marks=pytest.mark.long),
    pytest.param("add_sub_python_with_optional", "L0_example_add_sub_python_with_optionals",
                 "client.py", ["server.py"], id="add_sub_python_with_optional",
                 marks=pytest.mark.long),
    pytest.param("use_parameters_and_headers", "L0_example_use_parameters_and_headers",
                 "client.py", ["server.py"], id="use_parameters_and_headers",
                 marks=pytest.mark.long),
    pytest.param("identity_python", "L0_example_identity_python", "client.py", ["server.py"],
                 id="identity_python", marks=pytest.mark.long),
    pytest.param("multiple_models_python", "L0_example_multiple_models_example", "client.py",
                 ["server.py"], id="multiple_models_python", marks=pytest.mark.long),
    pytest.param("simple_python_remote_mode", "L0_example_simple_python_remote_mode",
                 "client.py", ["server_starting_triton.py", "server_remote_mul.py",
                               "server_remote_power.py"], id="simple_python_remote_mode"),
]


@pytest.mark.parametrize(("example", "functional_test", "client", "servers"), EXAMPLES)
def test_example(tmp_path: Path, example: str, functional_test: str, client: str,
                 servers: list[str]) -> None:
    root = upstream_copy(tmp_path)
    judge = load_functional_test(root, functional_test)
    # As the remote-mode functional test: one token for the server and the binders.
    env = {**os.environ, "TRITON_ACCESS_TOKEN": "test-access-token-12345"}
    report = run_example(root / "examples" / example, client, servers, env=env)
    outputs = "\n".join(f"--- {name} (exit {part['returncode']}):\n{part['output']}"
                        for name, part in report.items())
    assert report["client"]["returncode"] == 0, outputs
    for server in servers:
        # 0, or -2 when SIGINT ended it (as the functional tests accept)
        assert report[server]["returncode"] in (0, -2), outputs
    judge.verify_client_output(report["client"]["output"])
