"""Issue 32 item 4: a Python model's worker that writes junk to its socket, a header that is
not JSON, half a message, or an ``execute`` that never returns must not wedge its model.

Each fault is made by the model itself, inside a real worker of a real ``naiad serve``
(the adversary is model code: it can reach the worker's socket). Expected, for each: the
request fails at once with 503 naming the model and the fault, the worker is ended and a new
one starts (the model reads ready again and serves), an unload answers and leaves no
process behind, and a later load of the name serves.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, descendants, wait_until
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

# The request's id says what the model does before it answers: "ok", "junk" (random
# bytes on the socket), "badjson" (a frame whose header is not JSON), "half" (three bytes:
# the next real message is misread), "hang" (sleeps past the execute timeout).
SABOTEUR_PY = '''
import os
import struct
import time

import naiad_stub_calls
import naiad_stub_wire
import triton_python_backend_utils as pb_utils


def socket():
    return naiad_stub_calls.link.connection.sock


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            what = request.request_id()
            if what == "junk":
                socket().sendall(os.urandom(4096))
            elif what == "badjson":
                head = b"{this is not json"
                socket().sendall(struct.pack("<III", naiad_stub_wire.FRAME_MAGIC, len(head), 0)
                                 + head)
            elif what == "half":
                socket().sendall(b"\\x00\\x00\\x00")
            elif what == "hang":
                time.sleep(3600)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
'''


def _config(name: str, timeout_s: float = 0) -> str:
    parameters = (f'parameters {{ key: "EXECUTE_TIMEOUT_SECONDS" value: {{ string_value: '
                  f'"{timeout_s:g}" }} }}\n' if timeout_s else "")
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'instance_group [ { count: 1 kind: KIND_CPU } ]\n' + parameters)


def _write(repo: Path, name: str, timeout_s: float = 0) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(_config(name, timeout_s))
    (repo / name / "1" / "model.py").write_text(SABOTEUR_PY)


def _infer(client: httpclient.InferenceServerClient, model: str, what: str) -> np.ndarray:
    data = np.arange(4, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor], request_id=what)
    return result.as_numpy("OUTPUT0")


def _workers(server_pid: int) -> set[int]:
    return set(descendants(server_pid))


@pytest.fixture(scope="module")
def saboteur_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("saboteur-repo")
    _write(repo, "saboteur")
    _write(repo, "sleeper", timeout_s=1)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=*",
                      "--backend-config=python,worker-restart-delay-min-seconds=0.05",
                      "--backend-config=python,worker-restart-delay-max-seconds=0.2") as server:
        yield server


@pytest.mark.parametrize("fault", ["junk", "badjson", "half"])
def test_a_worker_that_breaks_the_protocol_is_restarted(saboteur_server, fault):
    with httpclient.InferenceServerClient(saboteur_server.http_url,
                                          network_timeout=ANSWER_TIMEOUT_S) as client:
        np.testing.assert_array_equal(_infer(client, "saboteur", "ok"), np.arange(4))
        before = _workers(saboteur_server.process.pid)
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as info:
            _infer(client, "saboteur", fault)
        assert time.monotonic() - started < 10
        assert info.value.status() == "503"
        message = info.value.message()
        assert "model 'saboteur'" in message and "by the server" in message, message
        wait_until(lambda: client.is_model_ready("saboteur"), "the model is ready again")
        np.testing.assert_array_equal(_infer(client, "saboteur", "ok"), np.arange(4))
        after = _workers(saboteur_server.process.pid)
        assert before - after and after - before, "the broken worker was not replaced"


def test_an_execute_past_its_timeout_fails_and_recycles_the_worker(saboteur_server):
    with httpclient.InferenceServerClient(saboteur_server.http_url,
                                          network_timeout=ANSWER_TIMEOUT_S) as client:
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as info:
            _infer(client, "sleeper", "hang")
        assert 1 <= time.monotonic() - started < 8
        assert info.value.status() == "503"
        assert "execute timeout of 1 s (EXECUTE_TIMEOUT_SECONDS)" in info.value.message()
        wait_until(lambda: client.is_model_ready("sleeper"), "the model is ready again")
        np.testing.assert_array_equal(_infer(client, "sleeper", "ok"), np.arange(4))


def test_unload_and_load_answer_after_a_fault(saboteur_server):
    pid = saboteur_server.process.pid
    with httpclient.InferenceServerClient(saboteur_server.http_url,
                                          network_timeout=ANSWER_TIMEOUT_S) as client:
        with pytest.raises(InferenceServerException):
            _infer(client, "saboteur", "junk")
        started = time.monotonic()
        client.unload_model("saboteur")  # while its worker restarts
        wait_until(lambda: not client.is_model_ready("saboteur"), "the model unloaded")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        wait_until(lambda: {m["name"]: m for m in client.get_model_repository_index()}
                   ["saboteur"].get("state") == "UNAVAILABLE", "the unload finished")
        assert time.monotonic() - started < 10, index
        client.load_model("saboteur")
        np.testing.assert_array_equal(_infer(client, "saboteur", "ok"), np.arange(4))
        # one worker per loaded model instance: none left behind by the faults
        wait_until(lambda: len(_workers(pid)) == 2, "one worker each for saboteur and sleeper")


def test_a_bad_timeout_parameter_fails_the_load_naming_it(saboteur_server, tmp_path):
    config = json.loads(json.dumps({
        "name": "bad_timeout", "backend": "python", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "parameters": {"EXECUTE_TIMEOUT_SECONDS": {"string_value": "soon"}}}))
    with httpclient.InferenceServerClient(saboteur_server.http_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.load_model("bad_timeout", config=json.dumps(config),
                              files={"file:1/model.py": SABOTEUR_PY.encode()})
        assert "EXECUTE_TIMEOUT_SECONDS is 'soon'" in info.value.message()
