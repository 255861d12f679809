"""Real engines on a real GPU: built from ONNX graphs with the TensorRT builder, served by
``naiad serve``, asked through tritonclient, and compared with numpy.

Skipped, with the reason, on machines without an NVIDIA GPU or without the tensorrt,
cuda-bindings and onnx packages (naiad's CI has no GPU: see the plugin README).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from backend_tensorrt_helpers import build_engine, gpu_skip_reason, onnx_graph

SKIP_REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")

# Batches of 1-4 rows run under profile 0, 5-16 under profile 1.
TWO_PROFILES = [{"INPUT0": ((1, 4), (2, 4), (4, 4))},
                {"INPUT0": ((5, 4), (8, 4), (16, 4))}]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trt-gpu-repo")
    double = onnx_graph("Add", "FP32", (-1, 4), double_input=True)
    build_engine(double, TWO_PROFILES, root / "trt_double" / "1" / "model.plan")
    (root / "trt_double" / "config.pbtxt").write_text(
        'backend: "tensorrt"\ninstance_group [ { kind: KIND_GPU, profile: ["0", "1"] } ]\n')
    # No config: auto-complete uses profile 0 only, as Triton does.
    build_engine(double, TWO_PROFILES, root / "trt_double_auto" / "1" / "model.plan")
    build_engine(onnx_graph("Add", "FP32", (3,), double_input=True), [],
                 root / "trt_fixed" / "1" / "model.plan")
    return root


@pytest.fixture(scope="module")
def clients(repo: Path) -> Iterator[dict]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    from naiad.testing import naiad_server

    with naiad_server("--model-repository", str(repo)) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        yield {"http": (httpclient, http), "grpc": (grpcclient, grpc)}
        http.close()
        grpc.close()


def _double(clients: dict, protocol: str, model: str, data: np.ndarray) -> np.ndarray:
    module, client = clients[protocol]
    request = module.InferInput("INPUT0", list(data.shape), "FP32")
    request.set_data_from_numpy(data)
    return client.infer(model, [request]).as_numpy("OUTPUT0")


def test_auto_complete_reads_the_engine(clients):
    _, grpc = clients["grpc"]
    double = grpc.get_model_config("trt_double").config
    assert double.platform == "tensorrt_plan"
    assert double.max_batch_size == 16  # the largest batch of the two listed profiles
    assert double.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in double.input] == [("INPUT0", [4])]
    assert [(t.name, list(t.dims)) for t in double.output] == [("OUTPUT0", [4])]
    assert grpc.get_model_config("trt_double_auto").config.max_batch_size == 4
    fixed = grpc.get_model_config("trt_fixed").config
    assert fixed.max_batch_size == 0
    assert [list(t.dims) for t in fixed.input] == [[3]]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("rows", [1, 3, 5, 16])  # both profiles, and each one's edges
def test_the_engine_computes_under_the_profile_that_fits(clients, protocol, rows):
    data = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) - 7.5
    np.testing.assert_array_equal(_double(clients, protocol, "trt_double", data), data * 2)


def test_a_batch_above_the_served_profiles_is_refused(clients):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="batch size 5"):
        _double(clients, "http", "trt_double_auto", np.ones((5, 4), np.float32))


def test_a_non_batching_engine(clients):
    data = np.array([1.5, -2.0, 3.25], np.float32)
    for protocol in ("http", "grpc"):
        np.testing.assert_array_equal(_double(clients, protocol, "trt_fixed", data), data * 2)
