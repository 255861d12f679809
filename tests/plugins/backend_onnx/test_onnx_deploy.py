"""Deploying an ONNX model over the load API (``file:`` parameters with a ``config``): a real
``naiad serve --model-control-mode explicit``, the official tritonclient over HTTP and gRPC,
answers compared with onnxruntime run in the test, and the filesystem checked after every
request that names a file outside the staging folder."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import (
    ADD_SUB_CONFIG,
    IR_VERSION,
    OPSET,
    add_sub_model,
    client_module,
    infer,
    mlp_model,
    reference,
    write_model,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

PROTOCOLS = ["http", "grpc"]
# How long a replaced version may take to unload (it has no requests: well under a second).
UNLOAD_WAIT_S = 30.0
FILES_MAX_BYTES = 64 * 1024
HTTP_MAX_BYTES = 256 * 1024

# The JSON configuration a client sends with the files (Triton's ModelConfig as JSON).
ADD_SUB_JSON = json.dumps({
    "backend": "onnxruntime",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
              {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
               {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
})
# Enough for onnxruntime's auto-complete to fill in the rest from the model file.
AUTO_JSON = '{"backend": "onnxruntime"}'

A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)


def sub_add_model() -> onnx.ModelProto:
    """add_sub's inputs and outputs, the other way round: OUTPUT0 = difference,
    OUTPUT1 = sum (so a test sees which of the two serves)."""
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "sub_add",
        [value("INPUT0", TensorProto.FLOAT, [4]), value("INPUT1", TensorProto.FLOAT, [4])],
        [value("OUTPUT0", TensorProto.FLOAT, [4]), value("OUTPUT1", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def onnx_bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's folder: ``repo`` (model ``calc``: add_sub, version 1) and ``staging``
    (the server's --load-files-directory); nothing else may appear in it."""
    root = tmp_path_factory.mktemp("deploy")
    write_model(root / "repo", "calc", add_sub_model(), ADD_SUB_CONFIG)
    (root / "staging").mkdir()
    return root


@pytest.fixture(scope="module")
def server(base: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(base / "repo"),
                      "--model-control-mode", "explicit", "--load-model", "calc",
                      "--load-files-directory", str(base / "staging"),
                      "--load-files-max-size", str(FILES_MAX_BYTES),
                      "--http-max-input-size", str(HTTP_MAX_BYTES)) as process:
        yield process


def client(server: ServerProcess, protocol: str) -> Any:
    """A tritonclient client of ``server`` over ``protocol``."""
    module = client_module(protocol)
    return module.InferenceServerClient(server.http_url if protocol == "http"
                                        else server.grpc_url)


def staged(base: Path) -> dict[str, set[str]]:
    """Model name -> the files staged for it now (relative to its model folder), over every
    load folder under the staging directory. The server removes load folders on its own
    threads: one that vanishes while it is read is listed again."""
    while True:
        found: dict[str, set[str]] = {}
        try:
            for model_dir in (base / "staging").glob("naiad-staging-*/load-*/*"):
                found.setdefault(model_dir.name, set()).update(
                    str(path.relative_to(model_dir)) for path in model_dir.rglob("*")
                    if path.is_file())
        except FileNotFoundError:
            continue
        return found


def gone_from_staging(base: Path, name: str) -> bool:
    """Whether ``name``'s staged files are removed, waiting for it while a version that used
    them may still be unloading (that happens after the load or unload returns)."""
    deadline = time.monotonic() + UNLOAD_WAIT_S
    while name in staged(base):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def outside_staging(base: Path) -> set[str]:
    """Every file and folder of the module's folder but the staging directory's content."""
    return {str(path.relative_to(base)) for path in base.rglob("*")
            if not path.is_relative_to(base / "staging")
            or path == base / "staging"}


def add_sub_answer(server: ServerProcess, protocol: str, model: str) -> dict[str, np.ndarray]:
    return infer(server, protocol, model, {"INPUT0": A, "INPUT1": B})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_deployed_with_its_files_serves_on_both_protocols(
        server: ServerProcess, base: Path, tmp_path: Path, protocol: str) -> None:
    name = f"deployed_{protocol}"
    model_file = write_model(tmp_path, "ref", add_sub_model())
    with client(server, protocol) as c:
        c.load_model(name, config=ADD_SUB_JSON,
                     files={"file:1/model.onnx": model_file.read_bytes()})
        assert c.is_model_ready(name, "1")
    expected = reference(model_file, {"INPUT0": A, "INPUT1": B})
    for served_over in PROTOCOLS:
        got = add_sub_answer(server, served_over, name)
        for output in ("OUTPUT0", "OUTPUT1"):
            np.testing.assert_array_equal(got[output], expected[output])
    assert staged(base)[name] == {"1/model.onnx"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_with_external_weights_deploys_as_two_files(
        server: ServerProcess, base: Path, tmp_path: Path, protocol: str) -> None:
    """An auto-completed configuration; the weights in a second file beside the model."""
    name = f"mlp_{protocol}"
    model_file = write_model(tmp_path, "ref", mlp_model(features=8, hidden=5, seed=7),
                             external=True)
    files = {"file:1/model.onnx": model_file.read_bytes(),
             "file:1/weights.bin": (model_file.parent / "weights.bin").read_bytes()}
    with client(server, protocol) as c:
        c.load_model(name, config=AUTO_JSON, files=files)
        metadata = c.get_model_metadata(name)
    inputs = np.arange(16, dtype=np.float32).reshape(2, 8) / 10
    got = infer(server, protocol, name, {"INPUT": inputs})
    expected = reference(model_file, {"INPUT": inputs})
    np.testing.assert_allclose(got["OUTPUT"], expected["OUTPUT"], rtol=1e-6)
    assert metadata is not None
    assert staged(base)[name] == {"1/model.onnx", "1/weights.bin"}


def test_deploying_over_a_repository_model_replaces_it_until_a_plain_load(
        server: ServerProcess, base: Path) -> None:
    """As in Triton: the files make up the model folder (here only version 2: version 1 of
    the repository stops serving); a load without files reads the repository again and the
    staged files go."""
    with client(server, "http") as c:
        c.load_model("calc", config=ADD_SUB_JSON,
                     files={"file:2/model.onnx": onnx_bytes(sub_add_model())})
        assert c.is_model_ready("calc", "2") and not c.is_model_ready("calc", "1")
        got = add_sub_answer(server, "grpc", "calc")
        np.testing.assert_array_equal(got["OUTPUT0"], A - B)
        assert "calc" in staged(base)

        c.load_model("calc")
        assert c.is_model_ready("calc", "1") and not c.is_model_ready("calc", "2")
        got = add_sub_answer(server, "http", "calc")
        np.testing.assert_array_equal(got["OUTPUT0"], A + B)
        assert gone_from_staging(base, "calc")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unloading_a_deployed_model_removes_its_files_and_it_cannot_load_again_bare(
        server: ServerProcess, base: Path, protocol: str) -> None:
    name = f"temporary_{protocol}"
    with client(server, protocol) as c:
        c.load_model(name, config=ADD_SUB_JSON,
                     files={"file:1/model.onnx": onnx_bytes(add_sub_model())})
        assert name in staged(base)
        # Reloading without files looks in the repository, which has no such model: an
        # error, and the deployed model keeps serving (Triton does the same).
        with pytest.raises(InferenceServerException, match=f"no model folder named '{name}'"):
            c.load_model(name)
        assert c.is_model_ready(name)
        c.unload_model(name)
        assert not c.is_model_ready(name)
    assert gone_from_staging(base, name)


BAD_NAMES = [
    pytest.param("file:../../../../escape_dotdot.onnx", "leaves the model folder", id="dotdot"),
    pytest.param("file:1/../../../../../escape_inner.onnx", "leaves the model folder",
                 id="inner-dotdot"),
    pytest.param("file:{base}/escape_absolute.onnx", "is an absolute path", id="absolute"),
    pytest.param("file:", "names no file", id="empty"),
    pytest.param("file:1/", "names a folder, not a file", id="folder"),
    pytest.param("file:./1//model.onnx", "name the same file", id="same-file"),
    pytest.param("file:1/model\0.onnx", "contains a NUL character", id="nul"),
    pytest.param("file:1\\model.onnx", "contains a backslash", id="backslash"),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("key, problem", BAD_NAMES)
def test_a_file_name_outside_the_model_folder_is_refused_and_nothing_is_written(
        server: ServerProcess, base: Path, protocol: str, key: str, problem: str) -> None:
    key = key.format(base=base)
    name = f"bad_{protocol}"
    before_outside, before_staged = outside_staging(base), staged(base)
    with client(server, protocol) as c:
        with pytest.raises(InferenceServerException) as caught:
            c.load_model(name, config=ADD_SUB_JSON,
                         files={"file:1/model.onnx": onnx_bytes(add_sub_model()),
                                key: b"not a model"})
        assert not c.is_model_ready(name)
    error = caught.value
    assert error.status() == ("400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT")
    assert problem in error.message() and name in error.message(), error.message()
    assert outside_staging(base) == before_outside
    assert staged(base) == before_staged
    assert not list(base.parent.glob("escape_*")) and not list(base.glob("escape_*"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_files_over_the_size_limit_are_refused_naming_the_setting(
        server: ServerProcess, base: Path, protocol: str) -> None:
    before = staged(base)
    files = {"file:1/model.onnx": onnx_bytes(add_sub_model()),
             "file:1/padding.bin": bytes(FILES_MAX_BYTES)}
    with client(server, protocol) as c:
        with pytest.raises(InferenceServerException) as caught:
            c.load_model("too_large", config=ADD_SUB_JSON, files=files)
        assert not c.is_model_ready("too_large")
    assert caught.value.status() == ("413" if protocol == "http"
                                     else "StatusCode.RESOURCE_EXHAUSTED")
    assert "--load-files-max-size" in caught.value.message()
    assert staged(base) == before


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_over_the_input_size_limit_is_refused_first(
        server: ServerProcess, base: Path, protocol: str) -> None:
    before = staged(base)
    with client(server, protocol) as c, pytest.raises(InferenceServerException) as caught:
        c.load_model("way_too_large", config=ADD_SUB_JSON,
                     files={"file:1/model.onnx": bytes(HTTP_MAX_BYTES)})
    if protocol == "http":
        assert caught.value.status() == "413"
        assert "--http-max-input-size" in caught.value.message()
    else:  # grpc refuses the message before naiad sees it
        assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert staged(base) == before


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_files_without_a_config_are_refused_and_the_model_keeps_serving(
        server: ServerProcess, protocol: str) -> None:
    with client(server, protocol) as c:
        with pytest.raises(InferenceServerException) as caught:
            c.load_model("calc", files={"file:1/model.onnx": onnx_bytes(sub_add_model())})
        assert c.is_model_ready("calc")
    assert caught.value.status() == ("400" if protocol == "http"
                                     else "StatusCode.INVALID_ARGUMENT")
    assert "'config' parameter is required" in caught.value.message()
    np.testing.assert_array_equal(add_sub_answer(server, protocol, "calc")["OUTPUT0"], A + B)


def _raw_load(server: ServerProcess, name: str, parameters: dict) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request("POST", f"/v2/repository/models/{name}/load",
                           json.dumps({"parameters": parameters}))
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize("content, problem", [
    pytest.param("!!not base64!!", "is not valid base64", id="not-base64"),
    pytest.param(base64.b64encode(b"abcd").decode().rstrip("=") + "x", "is not valid base64",
                 id="bad-padding"),
    pytest.param(12, "must be a string holding the file's content in base64", id="number"),
])
def test_http_file_content_must_be_base64(server: ServerProcess, base: Path, content: object,
                                          problem: str) -> None:
    before = staged(base)
    status, body = _raw_load(server, "bad_content",
                             {"config": ADD_SUB_JSON, "file:1/model.onnx": content})
    assert status == 400, body
    assert problem in body and "file:1/model.onnx" in body and "bad_content" in body
    assert staged(base) == before


def test_http_config_must_be_a_string(server: ServerProcess) -> None:
    status, body = _raw_load(server, "bad_config", {"config": {"backend": "onnxruntime"}})
    assert status == 400 and "'config' parameter must be a string" in body, body


def test_grpc_file_content_must_be_bytes(server: ServerProcess) -> None:
    request = service_pb2.RepositoryModelLoadRequest(model_name="string_content")
    request.parameters["config"].string_param = ADD_SUB_JSON
    request.parameters["file:1/model.onnx"].string_param = "not bytes"
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RepositoryModelLoad(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "expected bytes_param" in caught.value.details()


def test_shutdown_removes_the_staged_files(tmp_path: Path) -> None:
    write_model(tmp_path / "repo", "calc", add_sub_model(), ADD_SUB_CONFIG)
    staging = tmp_path / "staging"
    with naiad_server("--model-repository", str(tmp_path / "repo"),
                      "--model-control-mode", "explicit",
                      "--load-files-directory", str(staging)) as process:
        with client(process, "grpc") as c:
            c.load_model("deployed", config=ADD_SUB_JSON,
                         files={"file:1/model.onnx": onnx_bytes(add_sub_model())})
        assert len(list(staging.glob("naiad-staging-*/load-*/deployed/1/model.onnx"))) == 1
    assert list(staging.iterdir()) == []
