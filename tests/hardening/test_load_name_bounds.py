"""Issue 32, item 8: the names a load request with ``file:`` parameters makes into folders
are bounded before anything is written. Before the fix a 300-byte model name answered HTTP
500 / INTERNAL with the server's staging path in the message ("File name too long:
'/tmp/naiad-staging-...'"), and a file nested 1,500 folders deep was written (its unload then
answered 500 and left the files). Now both are 400 / INVALID_ARGUMENT naming the limit and
no server path, over both protocols, and the server goes on deploying models."""

from __future__ import annotations

import json

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY

from naiad.testing import ServerProcess

CONFIG = json.dumps({
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})
MODEL_PY = {"file:1/model.py": IDENTITY_PY.encode()}
CASES = {
    "a 300-byte model name": ("m" * 300, MODEL_PY, "at most 255 bytes"),
    "a file 1,500 folders deep": ("deep_files", {"file:" + "d/" * 1500 + "model.py": b""},
                                  "more than the 32 allowed"),
    "a 256-byte folder name": ("long_step", {"file:1/" + "f" * 256 + "/x.py": b""},
                               "longer than 255 bytes"),
}


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, hardening_server: ServerProcess):
    made = (httpclient.InferenceServerClient(hardening_server.http_url)
            if request.param == "http"
            else grpcclient.InferenceServerClient(hardening_server.grpc_url))
    yield made
    made.close()


@pytest.mark.parametrize("case", list(CASES))
def test_names_that_cannot_make_folders_are_refused(client, case: str):
    name, files, limit = CASES[case]
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(name, config=CONFIG, files=files)
    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), caught.value
    message = caught.value.message()
    assert limit in message
    assert "naiad-staging" not in message and "/tmp" not in message


def test_the_server_deploys_models_afterwards(client):
    client.load_model("bounded_names_ok", config=CONFIG, files=MODEL_PY)
    try:
        assert client.is_model_ready("bounded_names_ok")
    finally:
        client.unload_model("bounded_names_ok")
