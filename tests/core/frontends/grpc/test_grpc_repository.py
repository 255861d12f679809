"""The model repository extension over gRPC (``--model-control-mode explicit``) and the
message size limit (``--http-max-input-size``), end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_helpers import write_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

MIB = 1024 * 1024
A = np.array([1, 2, 3, 4], dtype=np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the two models the tests use (not one per datatype: a worker process each)
    repo = write_repository(tmp_path_factory.mktemp("grpc-repo"),
                            only=("identity_batch", "broken"))
    with naiad_server("--model-repository", str(repo), "--model-control-mode", "explicit",
                      "--load-model", "*", "--exit-on-error=false", "--strict-readiness=false",
                      "--http-max-input-size", str(MIB)) as process:
        yield process


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        yield c


def identity(client, model="identity_batch", data=None):
    data = np.array([A]) if data is None else data
    inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    return client.infer(model, [inp]).as_numpy("OUTPUT0")


def error(call, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return info.value


def test_unload_and_load(client):
    assert client.is_model_ready("identity_batch")
    client.unload_model("identity_batch")
    assert not client.is_model_ready("identity_batch")
    err = error(identity, client)
    assert err.status() == "StatusCode.NOT_FOUND" and "'identity_batch'" in err.message()
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["identity_batch"].state == "UNAVAILABLE"

    client.load_model("identity_batch")
    assert client.is_model_ready("identity_batch")
    np.testing.assert_array_equal(identity(client), [A])


def test_load_with_a_config_override(client):
    config = client.get_model_config("identity_batch", as_json=True)["config"]
    config["max_batch_size"] = 2
    client.load_model("identity_batch", config=json.dumps(config))
    assert client.get_model_config("identity_batch").config.max_batch_size == 2
    err = error(identity, client, data=np.zeros((3, 1), np.float32))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'identity_batch'" in err.message()
    client.load_model("identity_batch")  # back to config.pbtxt
    assert client.get_model_config("identity_batch").config.max_batch_size == 8


def test_load_errors(client):
    err = error(client.load_model, "nope")
    assert err.status() == "StatusCode.NOT_FOUND" and "'nope'" in err.message()
    err = error(client.load_model, "identity_batch", config="{not json")
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'identity_batch'" in err.message()
    assert client.is_model_ready("identity_batch")  # a failed reload keeps the old version
    err = error(client.load_model, "broken")  # tritonserver: INVALID_ARGUMENT "load failed..."
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "'broken'" in err.message()
    assert "deliberate failure in initialize" in err.message()
    client.unload_model("nope")  # nothing to unload succeeds, as in tritonserver
    np.testing.assert_array_equal(identity(client), [A])


def test_request_larger_than_the_limit(client):
    big = np.zeros((1, MIB // 4 + 16), np.float32)  # a little over 1 MiB of tensor data
    err = error(identity, client, data=big)
    # grpc rejects it before naiad sees it: "Received message larger than max (N vs. 1048576)"
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert str(MIB) in err.message()
    just_fits = np.ones((1, MIB // 8), np.float32)  # 512 KiB
    np.testing.assert_array_equal(identity(client, data=just_fits), just_fits)
