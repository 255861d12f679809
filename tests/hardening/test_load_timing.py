"""Issue 32, second round: loads that take long.

- An unload that arrives while its model loads waits for the load and then unloads it, as
  Triton 2.51 does (asked: the unload answers 200 once the load is done, the model then reads
  ``UNAVAILABLE`` / ``unloaded``). Before the fix naiad answered the unload at once, did
  nothing, and the model then served.
- ``--backend-config python,initialize-timeout-seconds``: an ``initialize`` that never returns
  fails its load with a message naming the setting, its worker process is killed, and the
  server keeps serving (Triton has no such timeout: off by default). Before, the load hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, descendants, wait_until
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

#: How long the server lets a worker start and initialize (this module's setting).
INITIALIZE_TIMEOUT_S = 5
#: How long slow_init's initialize sleeps: well under the timeout, long enough to unload in.
SLOW_INIT_S = 1.0

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "INIT_SLEEP_S" value { string_value: "%s" } }
"""
MODEL_PY = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        time.sleep(float(config["parameters"]["INIT_SLEEP_S"]["string_value"]))

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def _model(repo: Path, name: str, init_sleep_s: float) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG % init_sleep_s)
    (repo / name / "1" / "model.py").write_text(MODEL_PY)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("load-timing") / "repo"
    _model(repo, "quick", 0)
    _model(repo, "slow_init", SLOW_INIT_S)
    _model(repo, "never_init", 3600)  # the timeout ends it long before
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=quick", "--backend-config",
                      f"python,initialize-timeout-seconds={INITIALIZE_TIMEOUT_S}") as started:
        yield started


def _serves(client: httpclient.InferenceServerClient, model: str) -> None:
    data = np.arange(4, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def _state(client: httpclient.InferenceServerClient, model: str) -> tuple[str, str]:
    for entry in client.get_model_repository_index():
        if entry["name"] == model:
            return entry.get("state", ""), entry.get("reason", "")
    return "", ""


def _workers(server: ServerProcess) -> int:
    return len(descendants(server.process.pid))


def test_unload_during_load_unloads_after_the_load(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        workers = _workers(server)
        outcome: list[BaseException | None] = []

        def load() -> None:
            with httpclient.InferenceServerClient(server.http_url,
                                                  network_timeout=60) as loader:
                try:
                    loader.load_model("slow_init")
                    outcome.append(None)
                except BaseException as exc:  # reported by the assertion below
                    outcome.append(exc)

        loading = threading.Thread(target=load, daemon=True)
        loading.start()
        # its worker process exists: initialize runs (for SLOW_INIT_S)
        wait_until(lambda: _workers(server) > workers, "slow_init is loading")
        client.unload_model("slow_init")
        loading.join(ANSWER_TIMEOUT_S)
        assert not loading.is_alive(), "the load never answered"
        assert outcome == [None], f"the load failed: {outcome}"
        # Triton's order: the load finished, then the unload took the model down.
        assert not client.is_model_ready("slow_init")
        wait_until(lambda: _state(client, "slow_init") == ("UNAVAILABLE", "unloaded"),
                   "slow_init reads unloaded")
        wait_until(lambda: _workers(server) == workers, "slow_init's worker process ended")
        # nothing wedged: the name loads and serves again, and unloads
        client.load_model("slow_init")
        _serves(client, "slow_init")
        client.unload_model("slow_init")
        assert not client.is_model_ready("slow_init")
        _serves(client, "quick")


def test_initialize_that_never_returns_fails_the_load(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        workers = _workers(server)
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as failure:
            client.load_model("never_init")
        took = time.monotonic() - started
        message = str(failure.value)
        assert "never_init" in message
        assert f"initialize-timeout-seconds={INITIALIZE_TIMEOUT_S}" in message, message
        assert "was killed" in message
        assert INITIALIZE_TIMEOUT_S <= took < INITIALIZE_TIMEOUT_S + ANSWER_TIMEOUT_S
        wait_until(lambda: _workers(server) == workers, "never_init's worker process ended")
        assert not client.is_model_ready("never_init")
        state, reason = _state(client, "never_init")
        assert state == "UNAVAILABLE" and "initialize-timeout-seconds" in reason
        # the server keeps serving, and unloading the failed name answers
        _serves(client, "quick")
        client.unload_model("never_init")
        assert client.is_server_live()
