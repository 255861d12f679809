"""One program bound with the real PyTriton 0.7 (its own tritonserver 2.51) and with
naiad.pytriton (naiad's server): equal model configs (``/v2/models/M/config``) and equal
answers for a @batch model with a dynamic batcher, a BYTES identity, a non-batching model
with two instances and a decoupled generator streamed over gRPC.

The real PyTriton is installed by scripts/test into .venv/pytriton (its tritonserver
carries its own Python 3.11 stub); without it the test skips."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from naiad.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
PYTRITON_PYTHON = ROOT / ".venv" / "pytriton" / "bin" / "python"
SERVER = Path(__file__).with_name("differential_server.py")
READY_TIMEOUT_S = 180.0
MODELS = ["AddSub", "Identity", "Scale", "CountUp"]
# PyTriton's workspace folder (its proxy's sockets): a path of each side's own.
WORKSPACE_PARAMETER = "workspace-path"


class Served:
    """differential_server.py with one package, on free loopback ports."""

    def __init__(self, python: Path | str, package: str, env: dict[str, str]) -> None:
        self.http, self.grpc, self.metrics = free_port(), free_port(), free_port()
        self.process = subprocess.Popen(
            [str(python), str(SERVER), package, str(self.http), str(self.grpc),
             str(self.metrics)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, **env}, start_new_session=True)
        self.reader: threading.Thread | None = None

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout
        self.reader = threading.Thread(target=lambda: [lines.put(line) for line in stdout],
                                       daemon=True)
        self.reader.start()
        while True:
            line = lines.get(timeout=READY_TIMEOUT_S)
            if line.startswith("READY"):
                return

    def config(self, model: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/{model}/config",
                                    timeout=10) as answer:
            found = json.load(answer)
        assert WORKSPACE_PARAMETER in found["parameters"]
        found["parameters"][WORKSPACE_PARAMETER] = "<workspace>"
        return found

    def answers(self) -> dict[str, list]:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")
        found: dict[str, list] = {}

        def infer(model: str, tensors: list[tuple[str, np.ndarray, str]]) -> dict:
            inputs = []
            for name, data, datatype in tensors:
                item = httpclient.InferInput(name, list(data.shape), datatype)
                item.set_data_from_numpy(data, binary_data=True)
                inputs.append(item)
            result = client.infer(model, inputs)
            return {out["name"]: result.as_numpy(out["name"]).tolist()
                    for out in result.get_response()["outputs"]}

        found["AddSub"] = [infer("AddSub", [("a", np.array([[1.5], [2.0]], np.float32), "FP32"),
                                            ("b", np.array([[0.5], [4.0]], np.float32), "FP32")])]
        found["Identity"] = [infer("Identity", [
            ("INPUT_1", np.array([[0.25, 1e300]], np.float64), "FP64"),
            ("INPUT_2", np.array([[b"\xff\x00\x00\x00"]], dtype=object), "BYTES")])]
        found["Scale"] = [infer("Scale", [("x", np.array([2, -7], np.int32), "INT32")])]
        client.close()
        stream: queue.Queue[object] = queue.Queue()
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}")
        grpc.start_stream(callback=lambda result, error: stream.put(error or result))
        n = grpcclient.InferInput("n", [1, 1], "INT32")
        n.set_data_from_numpy(np.array([[3]], np.int32))
        grpc.async_stream_infer("CountUp", [n], enable_empty_final_response=True)
        counted = []
        while True:
            item = stream.get(timeout=30)
            assert not isinstance(item, Exception), item
            final = item.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                break
            counted.append(item.as_numpy("i").tolist())
        grpc.stop_stream()
        grpc.close()
        found["CountUp"] = counted
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.reader is not None:
            self.reader.join(10)  # at the pipe's end once the process is gone
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.mark.long  # two servers and the real PyTriton's start: about 40 s on 2 cores
def test_pytriton_and_naiad_pytriton_agree() -> None:
    if not PYTRITON_PYTHON.exists():
        pytest.skip(f"the real PyTriton 0.7 is not installed at {PYTRITON_PYTHON} "
                    "(scripts/test installs it)")
    # PyTriton with its default transport (the shared-memory tensor store): the server puts
    # its interpreter's libpython first for the stub (differential_server.py).
    triton = Served(PYTRITON_PYTHON, "pytriton", {})
    naiad = Served(sys.executable, "naiad.pytriton", {})
    try:
        triton.wait_ready()
        naiad.wait_ready()
        for model in MODELS:
            assert naiad.config(model) == triton.config(model), model
        expected = triton.answers()
        assert expected["CountUp"] == [[[0]], [[1]], [[2]]]
        assert naiad.answers() == expected
    finally:
        triton.stop()
        naiad.stop()
