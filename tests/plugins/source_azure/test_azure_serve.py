"""``naiad serve --model-repository as://...`` end to end: a real server process mirrors a
repository uploaded to a real Azurite and answers tritonclient.http; in poll mode a version
uploaded later is served; a key the store refuses stops start-up with one line."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from azure.storage.blob import ContainerClient
from azurite_server import ACCOUNT, Azurite, connection_string, upload_folder

from naiad.testing import ServerProcess, naiad_server

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
SECONDS = 1.0
# A safety net for the poll that picks the new version up (it takes a few poll periods).
NEW_VERSION_TIMEOUT_S = 90 * SECONDS
START_FAILURE_TIMEOUT_S = 120 * SECONDS
WRONG_KEY = "d3Jvbmcta2V5LW9mLXRoZS1yaWdodC1sZW5ndGgtZm9yLWF6dXJpdGUtdGVzdHM="


def server_env(azurite: Azurite, key: str | None = None) -> dict[str, str]:
    conn = azurite.connection_string if key is None else connection_string(azurite.port, key)
    return {"AZURE_STORAGE_CONNECTION_STRING": conn, "TRITON_CLOUD_CREDENTIAL_PATH": "",
            "AZURE_STORAGE_ACCOUNT": "", "AZURE_STORAGE_KEY": ""}


@pytest.fixture
def served(azurite: Azurite, container: ContainerClient,
           tmp_path: Path) -> Iterator[tuple[ServerProcess, ContainerClient]]:
    """add_sub (version 1) in the container, served in poll mode, one-second polls."""
    upload_folder(container, EXAMPLES / "add_sub", "models/add_sub/")
    uri = f"as://{ACCOUNT}/{container.container_name}/models"
    with naiad_server("--model-repository", uri, "--model-control-mode=poll",
                      "--repository-poll-secs=1",
                      "--repository-cache-dir", str(tmp_path / "cache"),
                      env=server_env(azurite)) as server:
        yield server, container


def infer(server: ServerProcess, model_version: str = "") -> np.ndarray:
    """add_sub on [1, 2, 3, 4] and ones; returns OUTPUT0 (checks OUTPUT1)."""
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs, model_version=model_version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    return result.as_numpy("OUTPUT0")


def test_serves_a_repository_in_azurite_and_picks_up_a_new_version(
        served: tuple[ServerProcess, ContainerClient]) -> None:
    server, container = served
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_model_ready("add_sub", "1")
    np.testing.assert_array_equal(infer(server), [2, 3, 4, 5])

    # Version 2 adds 100 to the sum: uploaded while the server polls
    model_py = (EXAMPLES / "add_sub/1/model.py").read_text()
    assert "(a + b)" in model_py
    container.upload_blob("models/add_sub/2/model.py",
                          model_py.replace("(a + b)", "(a + b + 100)").encode())
    deadline = time.monotonic() + NEW_VERSION_TIMEOUT_S
    while not client.is_model_ready("add_sub", "2"):
        assert time.monotonic() < deadline, f"version 2 not served:\n{server.log()}"
        time.sleep(0.2)
    np.testing.assert_array_equal(infer(server, "2"), [102, 103, 104, 105])
    np.testing.assert_array_equal(infer(server), [102, 103, 104, 105])
    # the default version policy (latest 1) retires version 1 once 2 serves
    deadline = time.monotonic() + NEW_VERSION_TIMEOUT_S
    while client.is_model_ready("add_sub", "1"):
        assert time.monotonic() < deadline, f"version 1 still served:\n{server.log()}"
        time.sleep(0.2)


def test_refused_key_stops_start_up_with_one_line(azurite: Azurite, container: ContainerClient,
                                                  tmp_path: Path) -> None:
    upload_folder(container, EXAMPLES / "add_sub", "models/add_sub/")
    uri = f"as://{ACCOUNT}/{container.container_name}/models"
    server = ServerProcess(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", uri,
         "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
         "--metrics-address", "127.0.0.1", "--http-port", "{http_port}",
         "--grpc-port", "{grpc_port}", "--metrics-port", "{metrics_port}",
         "--repository-cache-dir", str(tmp_path / "cache")],
        env=server_env(azurite, key=WRONG_KEY))
    with open(server.log_path, "wb") as log:
        process = subprocess.Popen(server.cmd, env=server.env, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        code = process.wait(START_FAILURE_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = server.log()
    assert code != 0, output
    assert f"'{uri}': access denied while listing (AuthorizationFailure)" in output
    assert "Traceback" not in output
    assert WRONG_KEY not in output
    assert "Request URL" not in output  # the SDK's request log stays out of the server's
