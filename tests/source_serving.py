"""What the source plugins' end-to-end tests share: add_sub answered over HTTP by a server
reading a bucket, and a start-up that must fail with one line and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from naiad.testing import ServerProcess, free_port

#: A safety net for ``naiad serve`` to give up on a repository it cannot read (not a measure).
EXIT_TIMEOUT_S = 120.0


def add_sub_over_http(server: ServerProcess, version: str = "") -> None:
    """add_sub (the examples' model) on [0, 1, 2, 3] and twos, both outputs checked."""
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 2, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("add_sub", inputs, model_version=version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def start_up_failure(uri: str, cache: Path, env: dict[str, str] | None = None) -> str:
    """What ``naiad serve`` prints when it cannot start with ``uri``; checks that it exits
    with an error and prints no traceback."""
    ports = []
    for flag in ("--http-port", "--grpc-port", "--metrics-port"):
        ports += [flag, str(free_port())]
    finished = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", uri,
         "--repository-cache-dir", str(cache), "--http-address", "127.0.0.1",
         "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *ports],
        capture_output=True, text=True, timeout=EXIT_TIMEOUT_S,
        env={**os.environ, **(env or {})})
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "Traceback" not in output, output
    return output
