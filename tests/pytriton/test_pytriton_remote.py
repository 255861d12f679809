"""The real PyTriton 0.7, unmodified, binds into naiad: ``RemoteTriton(url=<naiad's HTTP
address>)`` loads PyTriton's own proxy model.py (package-relative imports, ZeroMQ, its
shared-memory tensor store, the workspace-path parameter) into a naiad started with
``--model-control-mode=explicit``; naiad's Python backend runs it in a worker process and
clients get the callable's answers. The worker needs pyzmq (docs/pytriton.md)."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from naiad.pytriton.client import ModelClient
from naiad.testing import naiad_server

ROOT = Path(__file__).resolve().parents[2]
PYTRITON_PYTHON = ROOT / ".venv" / "pytriton" / "bin" / "python"
BINDER = Path(__file__).with_name("pytriton_remote_binder.py")
BIND_TIMEOUT_S = 120.0
# how long RemoteTriton gets to unload its model and end after SIGINT
STOP_TIMEOUT_S = 60.0
# how long an aborted binder gets to print its threads' stacks
STACKS_TIMEOUT_S = 10.0


def test_real_pytriton_remote_triton_binds_into_naiad(tmp_path: Path) -> None:
    if not PYTRITON_PYTHON.exists():
        pytest.skip(f"the real PyTriton 0.7 is not installed at {PYTRITON_PYTHON} "
                    "(scripts/test installs it)")
    if importlib.util.find_spec("zmq") is None:
        pytest.skip("PyTriton's proxy model needs pyzmq in naiad's environment "
                    "(scripts/test installs it)")
    repository = tmp_path / "repository"
    repository.mkdir()
    with naiad_server("--model-repository", str(repository),
                      "--model-control-mode=explicit") as server:
        # -X faulthandler: SIGABRT (when it does not stop) prints where its threads are
        binder = subprocess.Popen([str(PYTRITON_PYTHON), "-X", "faulthandler", str(BINDER),
                                   f"http://{server.http_url}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        output: list[str] = []
        bound = threading.Event()

        def read() -> None:
            assert binder.stdout is not None
            for line in binder.stdout:
                output.append(line)
                if line.startswith("BOUND"):
                    bound.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert bound.wait(BIND_TIMEOUT_S), "".join(output) + server.log()
            a = np.array([[1.0], [2.0]], np.float32)
            b = np.array([[2.0], [3.0]], np.float32)
            with ModelClient(server.http_url, "Mul") as client:
                np.testing.assert_array_equal(client.infer_batch(a, b)["mul"], a * b)
            with ModelClient(f"grpc://{server.grpc_url}", "Mul") as client:
                np.testing.assert_array_equal(client.infer_sample(a[1], b[1])["mul"], a[1] * b[1])
        finally:
            binder.send_signal(signal.SIGINT)
            try:
                binder.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                binder.send_signal(signal.SIGABRT)
                try:
                    binder.wait(STACKS_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    binder.kill()
                    binder.wait()
                output.append(f"[aborted: not stopped {STOP_TIMEOUT_S} s after SIGINT]")
            reader.join(10)
            if binder.stdout is not None:
                binder.stdout.close()
        assert binder.returncode in (0, -2), "".join(output) + server.log()
        # The binder unloaded its model on the way out.
        index = httpclient.InferenceServerClient(server.http_url)
        states = {m["name"]: m.get("state") for m in index.get_model_repository_index()}
        index.close()
        assert states.get("Mul") != "READY", states
