"""A real ``naiad serve`` with TensorRT models on a machine without a GPU: each is reported
UNAVAILABLE with a reason that says what to do, over HTTP and gRPC, while a Python model in
the same repository keeps serving.

One server per module runs with auto-complete (the default: the backend's checks run before
it reads an engine); a second, with ``--disable-auto-complete-config``, reaches the instance
path instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from backend_tensorrt_helpers import NOT_AN_ENGINE
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.gpus import gpu_count
from naiad.testing import ServerProcess, naiad_server
from naiad_backend_tensorrt.engine import missing_packages

pytestmark = pytest.mark.skipif(gpu_count() > 0, reason="checks how a machine without a GPU "
                                                        "reports TensorRT models; this one has "
                                                        "a GPU")

CONFIG = """
name: "{name}"
platform: "tensorrt_plan"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
instance_group [ {{ kind: {kind} }} ]
"""
NO_GPU = "TensorRT engines run only on an NVIDIA GPU and this machine has none"
CPU_GROUP = ("has kind KIND_CPU, but a TensorRT engine runs only on an NVIDIA GPU (use kind: "
             "KIND_GPU)")
TRT_MODELS = ("trt_gpu", "trt_cpu", "trt_bare")


def _write_repository(repo: Path) -> Path:
    for name, kind in (("trt_gpu", "KIND_GPU"), ("trt_cpu", "KIND_CPU")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, kind=kind))
        (repo / name / "1" / "model.plan").write_bytes(NOT_AN_ENGINE)
    # No config.pbtxt: the model.plan file alone makes it a TensorRT model.
    (repo / "trt_bare" / "1").mkdir(parents=True)
    (repo / "trt_bare" / "1" / "model.plan").write_bytes(NOT_AN_ENGINE)
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    return repo


def _serve(repo: Path, *args: str) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false", *args) as server:
        yield server


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_repository(tmp_path_factory.mktemp("trt-repo"))


@pytest.fixture(scope="module")
def trt_server(repo: Path) -> Iterator[ServerProcess]:
    yield from _serve(repo)


@pytest.fixture(scope="module")
def strict_server(repo: Path) -> Iterator[ServerProcess]:
    yield from _serve(repo, "--disable-auto-complete-config")


def _reasons(server: ServerProcess) -> dict[str, tuple[str, str]]:
    """``{model: (state, reason)}``, checked to be the same over HTTP and gRPC."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        by_http = {m["name"]: (m.get("state", ""), m.get("reason", ""))
                   for m in http.get_model_repository_index()}
        by_grpc = {m.name: (m.state, m.reason)
                   for m in grpc.get_model_repository_index().models}
    finally:
        http.close()
        grpc.close()
    assert by_http == by_grpc
    return by_http


def _assert_install_hint(reason: str) -> None:
    missing = missing_packages()
    if missing:
        assert f"(pip install {' '.join(missing)})" in reason, reason
        assert "'tensorrt'" in reason or "tensorrt" not in missing, reason


def test_a_gpu_model_without_a_gpu_is_unavailable_with_the_reason(trt_server):
    state, reason = _reasons(trt_server)["trt_gpu"]
    assert state == "UNAVAILABLE"
    assert reason.startswith(f"model 'trt_gpu' cannot load: {NO_GPU}"), reason
    _assert_install_hint(reason)


def test_a_cpu_instance_group_is_named_in_the_reason(trt_server):
    state, reason = _reasons(trt_server)["trt_cpu"]
    assert state == "UNAVAILABLE"
    assert reason.startswith(f"model 'trt_cpu' cannot load: instance group 'trt_cpu_0' "
                             f"{CPU_GROUP}; {NO_GPU}"), reason
    _assert_install_hint(reason)


def test_a_plan_file_without_config_is_a_tensorrt_model(trt_server):
    state, reason = _reasons(trt_server)["trt_bare"]
    assert state == "UNAVAILABLE"
    assert reason.startswith(f"model 'trt_bare' cannot load: {NO_GPU}"), reason


def test_tensorrt_models_are_not_ready_and_refuse_requests(trt_server):
    client = httpclient.InferenceServerClient(trt_server.http_url)
    try:
        for name in TRT_MODELS:
            assert not client.is_model_ready(name)
        data = np.ones((1, 4), np.float32)
        request = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        request.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("trt_gpu", [request])
        assert "trt_gpu" in str(caught.value)
    finally:
        client.close()


def test_the_other_models_keep_serving(trt_server):
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([4, 3, 2, 1], np.float32)
    http = httpclient.InferenceServerClient(trt_server.http_url)
    grpc = grpcclient.InferenceServerClient(trt_server.grpc_url)
    try:
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            inputs = [module.InferInput("INPUT0", [4], "FP32"),
                      module.InferInput("INPUT1", [4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert http.is_server_live() and grpc.is_server_live()
    finally:
        http.close()
        grpc.close()


# --- without auto-complete: the instance path -------------------------------------------

def test_without_auto_complete_a_cpu_instance_is_refused_by_the_backend(strict_server):
    state, reason = _reasons(strict_server)["trt_cpu"]
    assert state == "UNAVAILABLE"
    assert reason == ("instance 'trt_cpu_0_0': model 'trt_cpu': instance 'trt_cpu_0_0' has kind "
                      "KIND_CPU, but a TensorRT engine runs only on an NVIDIA GPU; use kind: "
                      "KIND_GPU"), reason


def test_without_auto_complete_a_gpu_instance_without_a_gpu_is_refused(strict_server):
    state, reason = _reasons(strict_server)["trt_gpu"]
    assert state == "UNAVAILABLE"
    assert "KIND_GPU" in reason and "no GPU" in reason, reason
    states = _reasons(strict_server)
    assert states["add_sub"][0] == "READY"
