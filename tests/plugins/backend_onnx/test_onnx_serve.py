"""ONNX models served end to end: a real ``naiad serve``, the official tritonclient over HTTP
and gRPC, and every answer compared with onnxruntime run directly in the test."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx_helpers import (
    ADD_SUB_CONFIG,
    add_sub_model,
    as_bytes,
    as_text,
    client_module,
    infer,
    mlp_model,
    reference,
    scalar_model,
    string_model,
    upper_model,
    write_model,
)
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

PROTOCOLS = ["http", "grpc"]

# Batches wait up to half a second for company, so concurrent requests share one execution.
MLP_CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
optimization { graph { level: 1 } }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "execution_mode" value: { string_value: "0" } }
parameters { key: "enable_mem_arena" value: { string_value: "0" } }
parameters { key: "enable_mem_pattern" value: { string_value: "1" } }
"""

# Every model but add_sub and mlp has no config.pbtxt: auto-complete fills it.
MODELS = {
    "add_sub": (add_sub_model, ADD_SUB_CONFIG, {}),
    "add_sub_auto": (add_sub_model, None, {}),
    "mlp": (mlp_model, MLP_CONFIG, {}),
    "mlp_auto": (mlp_model, None, {}),
    "strings": (string_model, None, {}),
    "upper": (upper_model, None, {}),
    "scalar": (scalar_model, None, {}),
    "external": (lambda: mlp_model(features=64, hidden=64, seed=3), None,
                 {"folder": True, "external": True}),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_repo")
    files = {name: write_model(root, name, build(), config, **options)
             for name, (build, config, options) in MODELS.items()}
    return root, files


@pytest.fixture(scope="module")
def onnx_server(repo):
    with naiad_server("--model-repository", str(repo[0])) as process:
        yield process


@pytest.fixture(scope="module")
def files(repo):
    return repo[1]


def config_of(server, model):
    with client_module("http").InferenceServerClient(server.http_url) as client:
        return client.get_model_config(model)


def assert_same(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for name, array in expected.items():
        assert got[name].dtype == array.dtype, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)


# --- outputs equal onnxruntime's -----------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["add_sub", "add_sub_auto"])
def test_add_sub_with_and_without_config(onnx_server, files, protocol, model):
    feeds = {"INPUT0": np.array([1, 2, 3, 4.5], np.float32),
             "INPUT1": np.array([4, 3, 2, 1], np.float32)}
    assert_same(infer(onnx_server, protocol, model, feeds), reference(files[model], feeds))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["mlp", "mlp_auto"])
def test_dynamic_batch_dimension(onnx_server, files, protocol, model):
    feeds = {"INPUT": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)}
    expected = reference(files[model], feeds)
    assert expected["OUTPUT"].shape == (3, 3)
    assert_same(infer(onnx_server, protocol, model, feeds), expected)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_only_the_requested_output(onnx_server, files, protocol):
    feeds = {"INPUT0": np.ones(4, np.float32), "INPUT1": np.arange(4, dtype=np.float32)}
    got = infer(onnx_server, protocol, "add_sub", feeds, outputs=["OUTPUT1"])
    assert_same(got, reference(files["add_sub"], feeds, ["OUTPUT1"]))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_model_folder_with_external_data(onnx_server, files, protocol):
    assert files["external"].parent.name == "model.onnx"
    assert (files["external"].parent / "weights.bin").stat().st_size >= 64 * 64 * 4
    feeds = {"INPUT": np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)}
    assert_same(infer(onnx_server, protocol, "external", feeds),
                reference(files["external"], feeds))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_string_tensors_round_trip(onnx_server, files, protocol):
    words = np.array([["héllo", "wörld", ""], ["日本語", "naiad", "a\x00b"]], dtype=object)
    data = as_bytes(words)
    got = infer(onnx_server, protocol, "strings", {"TEXT": data})
    expected = reference(files["strings"], {"TEXT": as_text(data)})
    assert got["TEXT_OUT"].tolist() == as_bytes(expected["TEXT_OUT"]).tolist()
    assert got["TEXT_OUT"].tolist() == data.tolist()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_string_op_with_scalar_per_batch_item(onnx_server, files, protocol):
    """upper's graph is WORDS [C]: served as dims [1] with an empty reshape, batch first."""
    config = config_of(onnx_server, "upper")
    assert config["max_batch_size"] == 4
    assert config["input"][0]["dims"] == [1] and config["input"][0]["reshape"] == {"shape": []}
    words = np.array([[b"naiad"], [b"Serves ONNX"], [b"x"]], dtype=object)
    got = infer(onnx_server, protocol, "upper", {"WORDS": words})
    expected = reference(files["upper"], {"WORDS": as_text(words.reshape(-1))})
    assert got["UPPER"].shape == (3, 1)
    assert got["UPPER"].reshape(-1).tolist() == as_bytes(expected["UPPER"]).tolist()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_scalar_graph_tensors_are_dims_one(onnx_server, files, protocol):
    config = config_of(onnx_server, "scalar")
    assert config["max_batch_size"] == 0
    assert config["input"][0]["dims"] == [1] and "reshape" not in config["input"][0]
    got = infer(onnx_server, protocol, "scalar", {"X": np.array([7], np.int64)})
    expected = reference(files["scalar"], {"X": np.array(7, np.int64)})
    assert got["Y"].shape == (1,)
    assert got["Y"].tolist() == [int(expected["Y"])] == [21]


# --- auto-complete ---------------------------------------------------------------------------


def test_auto_complete_matches_the_written_config(onnx_server):
    written = config_of(onnx_server, "add_sub")
    completed = config_of(onnx_server, "add_sub_auto")
    for key in ("max_batch_size", "input", "output"):
        assert completed.get(key, 0) == written.get(key, 0), key
    assert completed["platform"] == "onnxruntime_onnx"
    assert completed["backend"] == "onnxruntime"


def test_auto_complete_of_a_batching_model(onnx_server):
    config = config_of(onnx_server, "mlp_auto")
    assert config["max_batch_size"] == 4  # Triton's default-max-batch-size
    assert "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT", "TYPE_FP32", [4])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [
        ("OUTPUT", "TYPE_FP32", [3])]
    strings = config_of(onnx_server, "strings")
    assert [(t["data_type"], t["dims"]) for t in strings["input"]] == [("TYPE_STRING", [-1])]


def test_metadata_of_an_auto_completed_model(onnx_server):
    with client_module("http").InferenceServerClient(onnx_server.http_url) as client:
        metadata = client.get_model_metadata("mlp_auto")
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "INPUT", "datatype": "FP32", "shape": [-1, 4]}]
    assert metadata["outputs"] == [{"name": "OUTPUT", "datatype": "FP32", "shape": [-1, 3]}]


# --- session settings ----------------------------------------------------------------------


def session_line(server, instance: str) -> str:
    found = re.findall(rf"instance '{instance}': onnxruntime session .*", server.log())
    assert found, f"no session line for {instance} in the log:\n{server.log()}"
    return found[-1]


def test_parameters_reach_the_session(onnx_server):
    line = session_line(onnx_server, "mlp_0_0")
    assert "intra_op_num_threads=1," in line
    assert "inter_op_num_threads=1," in line
    assert "execution_mode=ORT_SEQUENTIAL" in line
    assert "graph_optimization_level=ORT_ENABLE_EXTENDED" in line
    assert "CPUExecutionProvider" in line


def test_default_threads_share_the_cores_between_instances(onnx_server):
    """mlp_auto has Triton's two default CPU instances: together they use the cores."""
    cores = len(os.sched_getaffinity(0))
    threads = [int(re.search(r"intra_op_num_threads=(\d+)", session_line(onnx_server, i))[1])
               for i in ("mlp_auto_0", "mlp_auto_1")]
    assert threads == [max(1, cores // 2)] * 2
    assert sum(threads) <= max(cores, 2)


# --- bad requests ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_text_that_is_not_utf8_is_a_clear_400(onnx_server, protocol):
    data = np.array([[b"fine", b"\xff\xfe not text"]], dtype=object)
    with pytest.raises(InferenceServerException) as caught:
        infer(onnx_server, protocol, "strings", {"TEXT": data})
    message = caught.value.message()
    assert "'TEXT'" in message and "'strings'" in message and "UTF-8" in message
    assert "element 1" in message
    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("inputs", "words"), [
    ({"INPUT": np.ones((1, 4), np.int32)}, ["'INPUT'", "INT32", "FP32"]),
    ({"INPUT": np.ones((1, 5), np.float32)}, ["'INPUT'", "[-1,4]", "[1,5]"]),
    ({"INPUT": np.ones((9, 4), np.float32)}, ["'INPUT'", "batch size 9"]),
    ({"WRONG": np.ones((1, 4), np.float32)}, ["'WRONG'"]),
])
def test_bad_inputs_name_model_and_tensor(onnx_server, protocol, inputs, words):
    with pytest.raises(InferenceServerException) as caught:
        infer(onnx_server, protocol, "mlp", inputs)
    message = caught.value.message()
    assert "'mlp'" in message
    for word in words:
        assert word in message
    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


# --- dynamic batching ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_requests_are_batched_and_answered_each_their_own(onnx_server, files,
                                                                     protocol):
    count = 8
    rng = np.random.default_rng(4)
    batches = [rng.standard_normal((1 + i % 2, 4)).astype(np.float32) for i in range(count)]
    with ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(
            lambda x: infer(onnx_server, protocol, "mlp", {"INPUT": x})["OUTPUT"], batches))
    for batch, answer in zip(batches, answers, strict=True):
        np.testing.assert_array_equal(answer, reference(files["mlp"], {"INPUT": batch})["OUTPUT"])
    with client_module("http").InferenceServerClient(onnx_server.http_url) as client:
        stats = client.get_inference_statistics("mlp")["model_stats"][0]
    # Requests of one or two rows: an execution of more than two rows merged requests.
    assert max(int(b["batch_size"]) for b in stats["batch_stats"]) > 2


def test_strings_as_http_json(onnx_server, files):
    """BYTES elements in the JSON body (not binary data) reach the graph as the same text."""
    words = np.array([["ünïcode ✓", "plain"]], dtype=object)
    module = client_module("http")
    with module.InferenceServerClient(onnx_server.http_url) as client:
        tensor = module.InferInput("TEXT", [1, 2], "BYTES")
        tensor.set_data_from_numpy(as_bytes(words), binary_data=False)
        result = client.infer("strings", [tensor], outputs=[
            module.InferRequestedOutput("TEXT_OUT", binary_data=False)])
    expected = reference(files["strings"], {"TEXT": words})["TEXT_OUT"]
    assert result.get_output("TEXT_OUT")["data"] == expected.reshape(-1).tolist()


# --- batches on the event loop -------------------------------------------------------------


@pytest.mark.parametrize("setting", ["50", "0"])
def test_many_clients_at_once_get_each_their_own_answer_wherever_batches_run(tmp_path, setting):
    """With the default ``--loop-execution-max-usecs`` the model's short runs move to the
    event loop while its thread is idle, and back while it is busy; with 0 they never do.
    Either way every request gets its own answer, over both protocols, and the statistics
    count every one once."""
    write_model(tmp_path, "add_sub", add_sub_model(), ADD_SUB_CONFIG)
    rng = np.random.default_rng(11)
    cases = [{"INPUT0": rng.standard_normal(4).astype(np.float32),
              "INPUT1": rng.standard_normal(4).astype(np.float32)} for _ in range(160)]
    model_file = tmp_path / "add_sub" / "1" / "model.onnx"
    with naiad_server("--model-repository", str(tmp_path),
                      "--loop-execution-max-usecs", setting) as server:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda item: infer(server, PROTOCOLS[item[0] % 2], "add_sub", item[1]),
                enumerate(cases)))
        with client_module("http").InferenceServerClient(server.http_url) as client:
            stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    for case, answer in zip(cases, answers, strict=True):
        assert_same(answer, reference(model_file, case))
    said = ("model 'add_sub' instance 'add_sub_0': batches whose recent runs took at most "
            "50 µs run on the event loop")
    assert (said in server.log()) is (setting == "50")
    inference = stats["inference_stats"]
    assert int(inference["success"]["count"]) == len(cases)
    assert int(inference["fail"]["count"]) == 0
    assert int(stats["execution_count"]) == len(cases)
