"""Loading ONNX models: --backend-config settings, configurations that do not fit the graph,
bad parameter values, missing providers and a backend that is not installed. Each failure
leaves the model UNAVAILABLE with a reason naming the model and what was expected, while
the other models serve."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx_helpers import add_sub_model, client_module, infer, mlp_model, reference, write_model

from naiad.gpus import gpu_count
from naiad.testing import naiad_server

MLP_IO = """
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""

# name -> (config.pbtxt or None, what the model's UNAVAILABLE reason must contain)
BROKEN = {
    "bad_level": ("max_batch_size: 8\n" + MLP_IO + "optimization { graph { level: 7 } }",
                  ["'bad_level'", "level: 7", "graph optimization level"]),
    "bad_threads": ("max_batch_size: 8\n" + MLP_IO + 'parameters { key: "intra_op_thread_count"'
                    ' value: { string_value: "many" } }',
                    ["'bad_threads'", "intra_op_thread_count=many", "whole number"]),
    "bad_mode": ("max_batch_size: 8\n" + MLP_IO + 'parameters { key: "execution_mode" '
                 'value: { string_value: "2" } }', ["'bad_mode'", "'execution_mode'", "0", "1"]),
    "bad_datatype": ("max_batch_size: 8\n" + MLP_IO.replace("TYPE_FP32 dims: [ 4 ]",
                                                            "TYPE_INT32 dims: [ 4 ]"),
                     ["'bad_datatype'", "'INPUT'", "TYPE_INT32", "TYPE_FP32"]),
    "bad_name": ("max_batch_size: 8\n" + MLP_IO.replace('"INPUT"', '"NOPE"'),
                 ["'bad_name'", "'INPUT'"]),
    "bad_dims": ("max_batch_size: 8\n" + MLP_IO.replace("dims: [ 3 ]", "dims: [ 5 ]"),
                 ["'bad_dims'", "'OUTPUT'", "[-1, 3]", "[5]"]),
    "bad_accelerator": (MLP_IO + "optimization { execution_accelerators { "
                        'cpu_execution_accelerator: [ { name: "fast" } ] } }',
                        ["'bad_accelerator'", "'fast'", "openvino"]),
    "no_batch_support": ("max_batch_size: 4", ["'no_batch_support'", "batching",
                                               "max_batch_size: 0"]),
    "not_onnx": (None, ["'not_onnx'", "onnxruntime could not load"]),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_load")
    files = {
        "threads_from_backend_config": write_model(root, "threads_from_backend_config",
                                                   mlp_model()),
        "threads_from_config": write_model(
            root, "threads_from_config", mlp_model(),
            'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
            'parameters { key: "inter_op_thread_count" value: { string_value: "2" } }\n'
            'parameters { key: "execution_mode" value: { string_value: "1" } }\n'
            'instance_group [ { count: 3 kind: KIND_CPU } ]'),
        "shared": write_model(
            root, "shared", mlp_model(),
            'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
            'parameters { key: "share_session_between_instances" '
            'value: { string_value: "true" } }'),
    }
    for name, (config, _) in BROKEN.items():
        build = add_sub_model if name == "no_batch_support" else mlp_model
        files[name] = write_model(root, name, build(), config)
    files["not_onnx"].write_bytes(b"this is not an ONNX protobuf")
    return root, files


@pytest.fixture(scope="module")
def onnx_server(repo):
    with naiad_server("--model-repository", str(repo[0]), "--exit-on-error=false",
                      "--strict-readiness=false",
                      "--backend-config", "onnxruntime,default-max-batch-size=16",
                      "--backend-config", "onnxruntime,intra_op_thread_count=2",
                      "--backend-config", "onnxruntime,inter_op_thread_count=3") as process:
        yield process


def reasons(server) -> dict[str, str]:
    with client_module("http").InferenceServerClient(server.http_url) as client:
        index = client.get_model_repository_index()
    return {entry["name"]: entry.get("reason", "") for entry in index
            if entry.get("state") == "UNAVAILABLE"}


def session_lines(server, model: str) -> list[str]:
    return re.findall(rf"model '{model}' instance '[^']+': onnxruntime session .*", server.log())


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_models_are_unavailable_with_a_reason(onnx_server, name):
    reason = reasons(onnx_server).get(name)
    assert reason is not None, f"{name} loaded"
    for word in BROKEN[name][1]:
        assert word in reason, f"{word!r} not in {reason!r}"


def test_backend_config_sets_default_max_batch_size(onnx_server):
    with client_module("http").InferenceServerClient(onnx_server.http_url) as client:
        config = client.get_model_config("threads_from_backend_config")
    assert config["max_batch_size"] == 16
    assert config["dynamic_batching"]["preferred_batch_size"] == [16]


def test_backend_config_thread_counts_reach_the_session(onnx_server):
    lines = session_lines(onnx_server, "threads_from_backend_config")
    assert len(lines) == 2  # Triton's two default CPU instances
    for line in lines:
        assert "intra_op_num_threads=2," in line
        assert "inter_op_num_threads=3," in line


def test_model_parameters_win_over_backend_config(onnx_server):
    lines = session_lines(onnx_server, "threads_from_config")
    assert len(lines) == 3
    for line in lines:
        assert "intra_op_num_threads=1," in line
        assert "inter_op_num_threads=2," in line
        # (onnxruntime itself runs sequentially when parallel mode has one inter-op thread)
        assert "execution_mode=ORT_PARALLEL" in line


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["threads_from_backend_config", "threads_from_config",
                                   "shared"])
def test_good_models_serve_next_to_broken_ones(onnx_server, repo, protocol, model):
    feeds = {"INPUT": np.arange(20, dtype=np.float32).reshape(5, 4) / 7}
    expected = reference(repo[1][model], feeds)
    np.testing.assert_array_equal(infer(onnx_server, protocol, model, feeds)["OUTPUT"],
                                  expected["OUTPUT"])


def test_instances_of_a_group_share_one_session(onnx_server):
    log = onnx_server.log()
    assert len(session_lines(onnx_server, "shared")) == 2
    # The one implicit instance group is called <model>_0.
    assert log.count("reusing the onnxruntime session of instance group 'shared_0'") == 1


def test_a_backend_that_is_not_installed_names_its_package(tmp_path):
    write_model(tmp_path, "add_sub", add_sub_model())
    with naiad_server("--model-repository", str(tmp_path), "--exit-on-error=false",
                      "--strict-readiness=false", "--block-plugin", "onnxruntime") as server:
        reason = reasons(server)["add_sub"]
    assert "pip install naiad-backend-onnx" in reason
    assert "pip install 'naiad[onnx]'" in reason
    assert "onnxruntime" in reason


@pytest.mark.skipif(gpu_count() == 0, reason="no NVIDIA GPU on this machine")
@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="the installed onnxruntime has no CUDAExecutionProvider "
                           "(install onnxruntime-gpu)")
def test_gpu_instance_runs_on_cuda(tmp_path):
    model_file = write_model(tmp_path, "mlp_gpu", mlp_model(),
                             "instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]")
    with naiad_server("--model-repository", str(tmp_path)) as server:
        [line] = session_lines(server, "mlp_gpu")
        assert "CUDAExecutionProvider" in line
        feeds = {"INPUT": np.ones((2, 4), np.float32)}
        np.testing.assert_allclose(infer(server, "grpc", "mlp_gpu", feeds)["OUTPUT"],
                                   reference(model_file, feeds)["OUTPUT"], rtol=1e-5)
