"""The ONNX backend's parts without a server: settings, providers, type conversions,
auto-complete, the config check, and instances executing batches in the test process."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc.model_config_pb2 as mc
from google.protobuf import text_format
from onnx_helpers import identity_model, mlp_model, reference, string_model, write_model

from naiad.config.defaults import fill_defaults
from naiad.errors import InferenceServerError, Status
from naiad.models.instances import expand_instance_groups
from naiad.types import InferenceRequest, InstanceInfo, ModelContext, RequestedOutput, Tensor
from naiad_backend_onnx.autocomplete import complete_config
from naiad_backend_onnx.backend import OnnxBackend
from naiad_backend_onnx.model_io import ModelIO, TensorInfo, check_config
from naiad_backend_onnx.providers import CPU, CUDA, TENSORRT, select_providers
from naiad_backend_onnx.settings import BackendSettings, session_count, session_settings
from naiad_backend_onnx.types import (
    NotUtf8Error,
    bf16_to_ortvalue,
    bytes_to_strings,
    ortvalue_to_numpy,
)


def config(text: str, name: str = "net") -> mc.ModelConfig:
    parsed = text_format.Parse(text, mc.ModelConfig())
    parsed.name = name
    return parsed


def fails(call, *fragments: str) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as caught:
        call()
    for fragment in fragments:
        assert fragment in caught.value.message, (fragment, caught.value.message)
    return caught.value


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "cpus", "threads"), [
    ("", 8, 8),
    ("instance_group [ { count: 2 kind: KIND_CPU } ]", 8, 4),
    ("instance_group [ { count: 3 kind: KIND_CPU } ]", 2, 1),
    ("instance_group [ { count: 1 }, { count: 3 } ]", 8, 2),
    ("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]", 8, 2),
])
def test_default_threads_divide_the_cores_between_sessions(groups, cpus, threads):
    settings = session_settings(config(groups), "net", BackendSettings(), cpus=cpus)
    assert settings.intra_op_threads == threads
    assert settings.inter_op_threads == 1  # sequential execution
    assert session_count(config(groups)) * threads <= max(cpus, session_count(config(groups)))


def test_parallel_execution_sizes_the_inter_op_pool_too():
    text = ('instance_group [ { count: 2 } ]\n'
            'parameters { key: "execution_mode" value: { string_value: "1" } }')
    settings = session_settings(config(text), "net", BackendSettings(), cpus=8)
    assert settings.parallel and settings.intra_op_threads == 4 == settings.inter_op_threads


def test_shared_sessions_count_once_per_group():
    text = ('instance_group [ { count: 4 } ]\n'
            'parameters { key: "share_session_between_instances" value: '
            '{ string_value: "1" } }')
    settings = session_settings(config(text), "net", BackendSettings(), cpus=8)
    assert settings.share_session and settings.intra_op_threads == 8


def test_explicit_values_win_in_order():
    backend = BackendSettings(intra_op_thread_count=3)
    assert session_settings(config(""), "net", backend, cpus=8).intra_op_threads == 3
    text = 'parameters { key: "intra_op_thread_count" value: { string_value: "0" } }'
    # 0 is onnxruntime's own default (a thread per core), as in Triton.
    assert session_settings(config(text), "net", backend, cpus=8).intra_op_threads == 0


def test_memory_and_graph_settings():
    text = ('optimization { graph { level: -1 } }\n'
            'parameters { key: "enable_mem_arena" value: { string_value: "0" } }\n'
            'parameters { key: "enable_mem_pattern" value: { string_value: "true" } }\n'
            'parameters { key: "memory.enable_memory_arena_shrinkage" '
            'value: { string_value: "cpu:0" } }')
    settings = session_settings(config(text), "net", BackendSettings(), cpus=2)
    assert settings.graph_level == "ORT_ENABLE_BASIC"
    assert settings.enable_mem_arena is False and settings.enable_mem_pattern is True
    assert settings.run_config == {"memory.enable_memory_arena_shrinkage": "cpu:0"}


@pytest.mark.parametrize(("text", "fragments"), [
    ("optimization { graph { level: 3 } }", ["model 'net'", "level: 3", "-1", "2"]),
    ('parameters { key: "inter_op_thread_count" value: { string_value: "-1" } }',
     ["model 'net'", "inter_op_thread_count=-1", "at least 0"]),
    ('parameters { key: "enable_mem_arena" value: { string_value: "maybe" } }',
     ["model 'net'", "enable_mem_arena=maybe", "true or false"]),
])
def test_bad_settings_name_the_key(text, fragments):
    fails(lambda: session_settings(config(text), "net", BackendSettings()), *fragments)


def test_backend_settings():
    parsed = BackendSettings.parse({"default-max-batch-size": "0", "intra_op_thread_count": "2"})
    assert parsed == BackendSettings(default_max_batch_size=0, intra_op_thread_count=2)
    fails(lambda: BackendSettings.parse({"default-max-batch-size": "x"}),
          "--backend-config onnxruntime,default-max-batch-size=x", "whole number")


# --- providers -----------------------------------------------------------------------------


def instance(kind: str = "KIND_CPU", device: int = 0) -> InstanceInfo:
    return InstanceInfo(name="net_0_0", kind=kind, device_id=device, index=0)


def test_cpu_instances_run_on_the_cpu_provider():
    assert select_providers(config(""), "net", instance(), [CPU]) == [(CPU, {})]


def test_gpu_instance_uses_cuda_on_its_device():
    text = ('parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }\n'
            'optimization { execution_accelerators { gpu_execution_accelerator: [ '
            '{ name: "cuda" parameters { key: "use_ep_level_unified_stream" value: "true" } } '
            '] } }')
    providers = select_providers(config(text), "net", instance("KIND_GPU", 1), [CUDA, CPU])
    assert providers == [(CUDA, {"cudnn_conv_algo_search": "HEURISTIC",
                                 "use_ep_level_unified_stream": "1", "device_id": "1"}),
                         (CPU, {})]


def test_tensorrt_comes_before_cuda_with_triton_parameter_names():
    text = ('optimization { execution_accelerators { gpu_execution_accelerator: [ { '
            'name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } '
            'parameters { key: "max_workspace_size_bytes" value: "1073741824" } '
            'parameters { key: "trt_engine_cache_enable" value: "true" } } ] } }')
    providers = select_providers(config(text), "net", instance("KIND_GPU", 0),
                                 [TENSORRT, CUDA, CPU])
    assert [name for name, _ in providers] == [TENSORRT, CUDA, CPU]
    assert providers[0][1] == {"trt_fp16_enable": "1", "trt_max_workspace_size": "1073741824",
                               "trt_engine_cache_enable": "1", "device_id": "0"}


def test_gpu_instance_without_cuda_provider_names_the_package():
    error = fails(lambda: select_providers(config(""), "net", instance("KIND_GPU"), [CPU]),
                  "model 'net'", "KIND_GPU", "onnxruntime-gpu")
    assert error.status is Status.UNAVAILABLE


def test_gpu_accelerators_are_ignored_on_cpu_instances():
    text = ('optimization { execution_accelerators { gpu_execution_accelerator: [ '
            '{ name: "tensorrt" } ] } }')
    assert select_providers(config(text), "net", instance(), [CPU]) == [(CPU, {})]


def test_unknown_tensorrt_parameter():
    text = ('optimization { execution_accelerators { gpu_execution_accelerator: [ { '
            'name: "tensorrt" parameters { key: "turbo" value: "1" } } ] } }')
    fails(lambda: select_providers(config(text), "net", instance("KIND_GPU"),
                                   [TENSORRT, CUDA, CPU]), "'turbo'", "TensorRT")


# --- types ---------------------------------------------------------------------------------


def test_bytes_become_text_and_bad_utf8_names_its_element():
    text = bytes_to_strings(np.array([[b"a", "é".encode()]], dtype=object))
    assert text.tolist() == [["a", "é"]]
    with pytest.raises(NotUtf8Error) as caught:
        bytes_to_strings(np.array([b"ok", b"ok", b"\xc3("], dtype=object))
    assert caught.value.index == 2 and "element 2" in str(caught.value)


def test_bf16_goes_through_ortvalues(tmp_path):
    path = write_model(tmp_path, "bf16", identity_model("BF16", batching=True))
    session = ort.InferenceSession(str(path), providers=[CPU])
    data = np.array([[1.5, -2.25, 3e38]], dtype=ml_dtypes.bfloat16)
    [value] = session.run_with_ort_values(["OUTPUT0"], {"INPUT0": bf16_to_ortvalue(data)})
    back = ortvalue_to_numpy(value)
    assert back.dtype == data.dtype
    np.testing.assert_array_equal(back.view(np.uint16), data.view(np.uint16))


# --- auto-complete and the config check ----------------------------------------------------


def info(name: str, datatype: str | None, *dims: int) -> TensorInfo:
    return TensorInfo(name, "tensor(x)", datatype, tuple(dims))


def io(inputs: list[TensorInfo], outputs: list[TensorInfo]) -> ModelIO:
    return ModelIO({i.name: i for i in inputs}, {o.name: o for o in outputs}, {})


def test_complete_fills_only_what_is_missing():
    target = config('output [ { name: "Y" data_type: TYPE_FP32 dims: [ 7 ] } ]')
    filled = complete_config(target, io([info("X", "FP32", -1, 2)], [info("Y", "FP32", -1, 3)]),
                             4, "net")
    assert filled == ["max_batch_size", "dynamic_batching", "input"]
    assert target.max_batch_size == 4 and list(target.input[0].dims) == [2]
    assert list(target.output[0].dims) == [7]  # left as config.pbtxt states it


def test_complete_without_batching_keeps_every_dimension():
    target = config("")
    complete_config(target, io([info("X", "INT64", 2, -1)], [info("Y", "BYTES")]), 4, "net")
    assert target.max_batch_size == 0 and not target.HasField("dynamic_batching")
    assert list(target.input[0].dims) == [2, -1]
    assert target.output[0].data_type == mc.TYPE_STRING and list(target.output[0].dims) == [1]
    assert not target.output[0].HasField("reshape")


def test_complete_refuses_a_batch_size_the_graph_cannot_take():
    fails(lambda: complete_config(config("max_batch_size: 2"),
                                  io([info("X", "FP32", 2)], [info("Y", "FP32", 2)]), 4, "net"),
          "model 'net'", "max_batch_size is 2")


def test_default_max_batch_size_of_zero_keeps_the_model_unbatched():
    target = config("")
    complete_config(target, io([info("X", "FP32", -1)], [info("Y", "FP32", -1)]), 0, "net")
    assert target.max_batch_size == 0 and list(target.input[0].dims) == [-1]


def test_check_accepts_model_wildcards_for_inputs_only():
    graph = io([info("X", "FP32", -1, -1)], [info("Y", "FP32", -1, -1)])
    check_config(config('max_batch_size: 2 input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] }]'
                        ' output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]'),
                 graph, "net")
    fails(lambda: check_config(config(
        'max_batch_size: 2 input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]'), graph, "net"),
        "output 'Y'", "[-1, -1]", "[3]")


def test_check_needs_every_graph_input_declared():
    graph = io([info("A", "FP32", 1), info("B", "FP32", 1)], [info("Y", "FP32", 1)])
    fails(lambda: check_config(config(
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]'), graph, "net"),
        "model 'net'", "input 'B'")


# --- instances in the test process ---------------------------------------------------------


def load(tmp_path: Path, name: str, model, text: str = "", backend_config=None):
    """Auto-complete, default and load the first instance, as the core does."""
    write_model(tmp_path, name, model, text or None)
    backend = OnnxBackend(backend_config)
    cfg = config(text, name)
    backend.auto_complete_config(cfg, tmp_path / name)
    fill_defaults(cfg, name, gpus=[])
    context = ModelContext(name, 1, cfg, tmp_path / name, tmp_path / name / "1", tmp_path, {})
    return backend.create_instance(context, expand_instance_groups(name, cfg)[0])


def bytes_request(name: str, rows: list[list[bytes]]) -> InferenceRequest:
    data = np.array(rows, dtype=object)
    return InferenceRequest("strings", 1, {"TEXT": Tensor("TEXT", "BYTES", data.shape, data)},
                            requested_outputs=None)


def test_a_bad_request_in_a_batch_fails_alone(tmp_path):
    instance = load(tmp_path, "strings", string_model())
    good = [bytes_request("strings", [[b"one", b"two"]]),
            bytes_request("strings", [[b"three", b"four"], [b"five", b"six"]])]
    bad = bytes_request("strings", [[b"\xff", b"x"]])
    responses = instance.execute([good[0], bad, good[1]])
    assert responses[0].outputs[0].data.tolist() == [[b"one", b"two"]]
    assert responses[1].error is not None and responses[1].error.status is Status.INVALID_ARG
    assert "element 0" in responses[1].error.message
    assert responses[2].outputs[0].data.tolist() == [[b"three", b"four"], [b"five", b"six"]]
    with pytest.raises(InferenceServerError):
        instance.execute([bad])  # a batch whose every request fails raises
    instance.close()


def test_a_batch_runs_once_and_is_split_per_request(tmp_path):
    instance = load(tmp_path, "mlp", mlp_model())
    rng = np.random.default_rng(5)
    parts = [rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 3, 2)]
    requests = [InferenceRequest("mlp", 1, {"INPUT": Tensor("INPUT", "FP32", p.shape, p)},
                                 requested_outputs=[RequestedOutput("OUTPUT")]) for p in parts]
    calls = []
    run = instance.session.run
    instance.session.run = lambda *args: calls.append(args) or run(*args)
    responses = instance.execute(requests)
    assert len(calls) == 1
    expected = reference(tmp_path / "mlp" / "1" / "model.onnx", {"INPUT": np.concatenate(parts)})
    rows = np.split(expected["OUTPUT"], [1, 4])
    for response, want in zip(responses, rows, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, want)
    instance.close()


def test_bf16_model_in_process(tmp_path):
    instance = load(tmp_path, "bf16", identity_model("BF16", batching=True))
    data = np.array([[0.5, -1.0, 65280.0]], dtype=ml_dtypes.bfloat16)
    [response] = instance.execute([InferenceRequest(
        "bf16", 1, {"INPUT0": Tensor("INPUT0", "BF16", data.shape, data)})])
    out = response.outputs[0]
    assert out.datatype == "BF16" and out.data.dtype == data.dtype
    np.testing.assert_array_equal(out.data.view(np.uint16), data.view(np.uint16))
    instance.close()


@pytest.mark.parametrize(("text", "feature"), [
    ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 '
     'source_input: "INPUT" } ]', "batch_input"),
    ("model_transaction_policy { decoupled: true }", "decoupled mode"),
    ('model_operations { op_library_filename: "libcustom.so" }', "model_operations"),
])
def test_unsupported_features_are_refused_not_ignored(tmp_path, text, feature):
    error = fails(lambda: load(tmp_path, "mlp", mlp_model(), text), "model 'mlp'", feature)
    assert error.status is Status.UNSUPPORTED


def test_shared_sessions_are_one_session_per_group(tmp_path):
    text = ('instance_group [ { name: "a" count: 2 }, { name: "b" count: 1 } ]\n'
            'parameters { key: "share_session_between_instances" value: '
            '{ string_value: "yes" } }')
    write_model(tmp_path, "mlp", mlp_model(), text)
    cfg = config(text, "mlp")
    backend = OnnxBackend()
    backend.auto_complete_config(cfg, tmp_path / "mlp")
    fill_defaults(cfg, "mlp", gpus=[])
    context = ModelContext("mlp", 1, cfg, tmp_path / "mlp", tmp_path / "mlp" / "1", tmp_path, {})
    loaded = [backend.create_instance(context, info)
              for info in expand_instance_groups("mlp", cfg)]
    assert loaded[0].session is loaded[1].session
    assert loaded[2].session is not loaded[0].session
    for each in loaded:
        each.close()
    assert not backend.shared._sessions


def test_a_cpu_session_may_run_on_any_thread(tmp_path):
    """ONNX Runtime on the CPU keeps nothing per calling thread, so the core may run its
    short batches on the event loop (``ModelInstance.any_thread``); a session on a GPU
    provider would not say so."""
    instance = load(tmp_path, "mlp", mlp_model())
    try:
        assert instance.session.get_providers() == [CPU]
        assert instance.any_thread is True
    finally:
        instance.close()
