"""Model control, request limits and shutdown, each against its own server process."""

from __future__ import annotations

import gzip
import json
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from test_http_e2e import add_sub_inputs, raw
from tritonclient.utils import InferenceServerException
from zoo import (
    ADD_SUB_CONFIG,
    ADD_SUB_PY,
    BROKEN_INIT_PY,
    SLOW_PY,
    identity_config,
    write_model,
)

from naiad.testing import naiad_server


@pytest.fixture
def repo(tmp_path):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(tmp_path, "slow", identity_config("slow", "TYPE_FP32"), SLOW_PY)
    return tmp_path


def test_explicit_load_and_unload(repo):
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model", "add_sub") as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert client.is_model_ready("add_sub")
        assert not client.is_model_ready("slow")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["slow"] == {"name": "slow"}
        client.load_model("slow")
        assert client.is_model_ready("slow")
        client.unload_model("add_sub")
        assert not client.is_model_ready("add_sub")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["add_sub"]["state"] == "UNAVAILABLE"
        assert index["add_sub"]["reason"] == "unloaded"
        _, _, inputs = add_sub_inputs()
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", inputs)
        assert info.value.status() == "404"
        assert "no available versions" in info.value.message()
        client.load_model("add_sub")
        a, b, inputs = add_sub_inputs()
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT1"), a - b)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("no_such_model")
        assert info.value.status() == "404"
        assert "no_such_model" in info.value.message()


def test_load_with_config_override(repo):
    override = json.dumps({"name": "add_sub", "backend": "python", "max_batch_size": 0,
                           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                                     {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
                           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                                      {"name": "OUTPUT1", "data_type": "TYPE_FP32",
                                       "dims": [4]}],
                           "parameters": {"origin": {"string_value": "override"}}})
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit") \
            as server, httpclient.InferenceServerClient(server.http_url) as client:
        client.load_model("add_sub", config=override)
        config = client.get_model_config("add_sub")
        assert config["parameters"]["origin"]["string_value"] == "override"


def test_request_size_limit(repo):
    with naiad_server("--model-repository", str(repo), "--http-max-input-size", "1000") \
            as server:
        big = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                                      "data": [1.0] * 4}], "pad": "x" * 2000})
        status, _, data = raw(server, "POST", "/v2/models/add_sub/infer", big)
        assert status == 413
        assert "--http-max-input-size" in json.loads(data)["error"]
        # A small compressed body that expands past the limit is refused too.
        bomb = gzip.compress(big.encode())
        assert len(bomb) < 1000
        status, _, data = raw(server, "POST", "/v2/models/add_sub/infer", bomb,
                              {"Content-Encoding": "gzip"})
        assert status == 413
        assert "decompressed" in json.loads(data)["error"]
        with httpclient.InferenceServerClient(server.http_url) as client:
            a, b, inputs = add_sub_inputs()
            np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"),
                                          a + b)


def test_sigterm_drains_in_flight_requests(repo):
    with naiad_server("--model-repository", str(repo)) as server:
        results = {}

        def call():
            with httpclient.InferenceServerClient(server.http_url) as client:
                tensor = httpclient.InferInput("INPUT0", [2], "FP32")
                tensor.set_data_from_numpy(np.array([1, 2], np.float32))
                results["out"] = client.infer("slow", [tensor]).as_numpy("OUTPUT0")

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.4)  # the request is inside the model's one-second execute
        server.signal(signal.SIGTERM)
        thread.join(30)
        np.testing.assert_array_equal(results["out"], [1, 2])
        assert server.process.wait(30) == 0


def test_strict_readiness_waits_for_failed_models(tmp_path):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(tmp_path, "broken_init", identity_config("broken_init", "TYPE_FP32"),
                BROKEN_INIT_PY)
    with naiad_server("--model-repository", str(tmp_path), "--exit-on-error=false",
                      ready_status=400) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert client.is_server_live()
        assert not client.is_server_ready()
        assert client.is_model_ready("add_sub")


def test_exit_on_error_fails_startup(tmp_path):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(tmp_path, "bad", "name: \"bad\"\nbackend: \"python\"\nnonsense: 1\n", ADD_SUB_PY)
    with pytest.raises(RuntimeError) as info, naiad_server("--model-repository", str(tmp_path)):
        pass
    assert "bad" in str(info.value)


AUTO_COMPLETE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        auto_complete_model_config.set_max_batch_size(4)
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""


def test_model_without_config_is_auto_completed_and_logged(tmp_path):
    write_model(tmp_path, "auto", None, AUTO_COMPLETE_PY)
    with naiad_server("--model-repository", str(tmp_path)) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        meta = client.get_model_metadata("auto")
        assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
        config = client.get_model_config("auto")
        assert config["backend"] == "python" and config["max_batch_size"] == 4
        tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
        np.testing.assert_array_equal(client.infer("auto", [tensor]).as_numpy("OUTPUT0"),
                                      [[2, 4]])
        log = server.log()
    assert "auto-completed fields:" in log
    marked = log.split("auto-completed fields:", 1)[1].split(")", 1)[0]
    for field in ("input", "output", "max_batch_size", "backend"):
        assert field in marked


def test_strict_model_config_refuses_a_missing_config(tmp_path):
    write_model(tmp_path, "auto", None, AUTO_COMPLETE_PY)
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(tmp_path), "--strict-model-config=true",
                      "--exit-on-error=false", "--strict-readiness=false") as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["auto"]["state"] == "UNAVAILABLE"
        assert "config.pbtxt" in index["auto"]["reason"]
        assert client.is_model_ready("add_sub")


def test_hypercorn_serves_the_same_protocol(repo):
    with naiad_server("--model-repository", str(repo), "--http-server", "hypercorn") \
            as server, httpclient.InferenceServerClient(server.http_url) as client:
        a, b, inputs = add_sub_inputs()
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        with pytest.raises(InferenceServerException) as info:
            client.infer("no_such_model", inputs)
        assert info.value.status() == "404"
        status, _, data = raw(server, "POST", "/v2/models/add_sub/infer", b"{bad")
        assert status == 400 and b"not valid JSON" in data
