"""SIGTERM ends the process within ``--exit-timeout-secs`` plus ``--exit-grace-secs``
whatever the models do (issue 17, item 6).

A model blocked forever in ``execute``, in its own worker process and in a thread of the
server, with HTTP and gRPC requests in flight: after the exit timeout those requests are
answered 503 / UNAVAILABLE, the process exits with status 1 and the log names what it left.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import identity_config, write_model

from naiad.testing import naiad_server

STUCK_PY = """
import time


class TritonPythonModel:
    def execute(self, requests):
        while True:
            time.sleep(1)
"""
EXIT_TIMEOUT_S = 2
EXIT_GRACE_S = 4
IN_FLIGHT = 3  # per protocol


@pytest.mark.parametrize("mode", ["isolated", "in_process"])
def test_sigterm_with_a_stuck_model_exits_in_bounded_time(tmp_path: Path, mode: str) -> None:
    config = identity_config("stuck", "TYPE_FP32") + (
        f'parameters {{ key: "EXECUTION_MODE" value {{ string_value: "{mode}" }} }}\n')
    write_model(tmp_path, "stuck", config, STUCK_PY)
    answers: list[str] = []
    with naiad_server("--model-repository", str(tmp_path),
                      f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
                      f"--exit-grace-secs={EXIT_GRACE_S}") as server:
        http = httpclient.InferenceServerClient(server.http_url, concurrency=IN_FLIGHT,
                                                network_timeout=60)
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        pending = [http.async_infer("stuck", [tensor]) for _ in range(IN_FLIGHT)]
        grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
        grpc_tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
        grpc_tensor.set_data_from_numpy(np.ones(1, np.float32))
        grpc_done = threading.Semaphore(0)

        def on_grpc(result: object, error: InferenceServerException | None) -> None:
            answers.append(f"grpc {error.status() if error else 'ok'} "
                           f"{error.message() if error else ''}")
            grpc_done.release()

        for _ in range(IN_FLIGHT):
            grpc_client.async_infer("stuck", [grpc_tensor], callback=on_grpc)
        time.sleep(1.0)  # every request reached the model
        assert server.process is not None
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        for request in pending:
            try:
                request.get_result(block=True, timeout=EXIT_TIMEOUT_S + EXIT_GRACE_S + 10)
                answers.append("http ok")
            except InferenceServerException as exc:
                answers.append(f"http {exc.status()} {exc.message()}")
        for _ in range(IN_FLIGHT):
            assert grpc_done.acquire(timeout=EXIT_GRACE_S + 10)
        code = server.process.wait(EXIT_TIMEOUT_S + EXIT_GRACE_S + 10)
        took = time.monotonic() - began
        http.close()
        grpc_client.close()
        log = server.log()
    assert code == 1, log
    assert took < EXIT_TIMEOUT_S + EXIT_GRACE_S + 5, (took, log)
    assert len(answers) == 2 * IN_FLIGHT
    for answer in answers:
        assert answer.startswith(("http 503", f"grpc {grpc.StatusCode.UNAVAILABLE}")), answers
    assert f"still in flight after {EXIT_TIMEOUT_S} s (--exit-timeout-secs)" in log
    if mode == "in_process":  # a thread cannot be stopped: the log says which one is left
        assert "model 'stuck' version 1 instance 'stuck_0'" in log
    assert "Traceback" not in log
