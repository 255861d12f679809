"""Reading config.pbtxt (naiad.config.parse) and choosing the backend (naiad.config.platforms)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.config.parse import load_config_file, parse_config_text
from naiad.config.platforms import ENSEMBLE, resolve_backend
from naiad.errors import InferenceServerError, Status

GOOD = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1, 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "k" value { string_value: "v" } }
"""


def parse_error(text: str, source: str = "/repo/m/config.pbtxt") -> str:
    with pytest.raises(InferenceServerError) as info:
        parse_config_text(text, source)
    assert info.value.status == Status.INVALID_ARG
    return info.value.message


# --- parse ---------------------------------------------------------------------------------

def test_parses_a_good_config() -> None:
    config = parse_config_text(GOOD, "add_sub/config.pbtxt")
    assert config.name == "add_sub"
    assert config.max_batch_size == 8
    assert config.input[0].data_type == DataType.TYPE_FP32
    assert list(config.output[0].dims) == [-1, 2]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.instance_group[0].count == 2
    assert config.parameters["k"].string_value == "v"


def test_empty_text_is_an_empty_config() -> None:
    assert parse_config_text("", "m/config.pbtxt") == ModelConfig()


@pytest.mark.parametrize(("text", "expected"), [
    # syntax error: a list that is never closed
    ('backend: "python"\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }\n',
     ['3:1', 'Expected ","']),
    # unknown field
    ('backend: "python"\nmax_batch_sizes: 4\n',
     ['2:1', 'has no field named "max_batch_sizes"']),
    # wrong enum value
    ('input [ { name: "INPUT0" data_type: TYPE_FLOAT32 dims: [ 4 ] } ]',
     ['1:37', 'has no value named TYPE_FLOAT32']),
    # a number where a string belongs
    ('name: 7', ['1:7', 'Expected string']),
    # a non-repeated field given twice (Triton's C++ parser refuses it too)
    ('max_batch_size: 1\nmax_batch_size: 2', ['2:', 'max_batch_size']),
    # two members of one oneof (dynamic and sequence batching exclude each other)
    ('dynamic_batching { }\nsequence_batching { }',
     ['2:', 'sequence_batching', 'dynamic_batching']),
])
def test_malformed_text_names_the_file_and_the_position(text: str, expected: list[str]) -> None:
    message = parse_error(text)
    assert message.startswith("failed to read model configuration /repo/m/config.pbtxt: ")
    for fragment in expected:
        assert fragment in message


def test_load_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text(GOOD)
    config = load_config_file(tmp_path)
    assert config is not None and config.name == "add_sub"


def test_missing_config_file_is_none(tmp_path: Path) -> None:
    assert load_config_file(tmp_path) is None


def test_custom_config_name_is_preferred_and_falls_back(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "default"')
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "h100.pbtxt").write_text('name: "custom"')
    assert load_config_file(tmp_path, "h100").name == "custom"  # type: ignore[union-attr]
    assert load_config_file(tmp_path, "a100").name == "default"  # type: ignore[union-attr]


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text("max_batch_size: [")
    with pytest.raises(InferenceServerError, match=f"{path}: 1:"):
        load_config_file(tmp_path)
    path.write_bytes(b'name: "\xff"')
    with pytest.raises(InferenceServerError, match="not UTF-8"):
        load_config_file(tmp_path)
    path.unlink()
    path.mkdir()
    with pytest.raises(InferenceServerError, match="failed to read model configuration"):
        load_config_file(tmp_path)


# --- platforms -----------------------------------------------------------------------------

@pytest.mark.parametrize(("platform", "backend"), [
    ("onnxruntime_onnx", "onnxruntime"),
    ("pytorch_libtorch", "pytorch"),
    ("tensorrt_plan", "tensorrt"),
    ("tensorflow_savedmodel", "tensorflow"),
    ("tensorflow_graphdef", "tensorflow"),
])
def test_platform_names_the_backend(platform: str, backend: str) -> None:
    config = ModelConfig(platform=platform)
    assert resolve_backend(config, "m") == backend
    assert config.backend == backend


@pytest.mark.parametrize(("backend", "platform"), [
    ("onnxruntime", "onnxruntime_onnx"),
    ("pytorch", "pytorch_libtorch"),
    ("tensorrt", "tensorrt_plan"),
    ("python", ""),
    ("my_custom", ""),
])
def test_backend_fills_the_platform_where_triton_does(backend: str, platform: str) -> None:
    config = ModelConfig(backend=backend)
    assert resolve_backend(config, "m") == backend
    assert config.platform == platform


def test_ensemble_is_the_builtin_scheduler() -> None:
    config = ModelConfig(platform="ensemble")
    assert resolve_backend(config, "ens") == ENSEMBLE
    assert config.backend == ""


def test_python_backend_accepts_any_platform() -> None:
    # Triton 2.51 loads backend "python" with platform "onnxruntime_onnx" (observed).
    config = ModelConfig(backend="python", platform="onnxruntime_onnx")
    assert resolve_backend(config, "m") == "python"


@pytest.mark.parametrize(("config", "expected"), [
    (ModelConfig(backend="onnxruntime", platform="pytorch_libtorch"),
     ["model 'm'", "platform 'pytorch_libtorch' does not match backend 'onnxruntime'",
      "'onnxruntime_onnx'"]),
    (ModelConfig(backend="tensorflow"),
     ["model 'm'", "platform '' does not match backend 'tensorflow'", "tensorflow_savedmodel"]),
    (ModelConfig(platform="foo_bar"),
     ["model 'm'", "unknown platform 'foo_bar'", "onnxruntime_onnx", "set 'backend'"]),
    (ModelConfig(platform="ensemble", backend="python"),
     ["model 'm'", "ensemble", "must not name a backend", "'python'"]),
    (ModelConfig(),
     ["model 'm'", "neither 'backend' nor 'platform'", 'backend: "python"']),
    (ModelConfig(default_model_filename="weights.bin"),
     ["model 'm'", "default_model_filename 'weights.bin'"]),
])
def test_backend_errors_name_the_model(config: ModelConfig, expected: list[str]) -> None:
    with pytest.raises(InferenceServerError) as info:
        resolve_backend(config, "m")
    assert info.value.status == Status.INVALID_ARG
    for fragment in expected:
        assert fragment in info.value.message


@pytest.mark.parametrize(("entry", "is_dir", "backend", "platform"), [
    ("model.py", False, "python", ""),
    ("model.onnx", False, "onnxruntime", "onnxruntime_onnx"),
    ("model.onnx", True, "onnxruntime", "onnxruntime_onnx"),
    ("model.pt", False, "pytorch", "pytorch_libtorch"),
    ("model.plan", False, "tensorrt", "tensorrt_plan"),
    ("model.savedmodel", True, "tensorflow", "tensorflow_savedmodel"),
])
def test_backend_from_the_model_file(tmp_path: Path, entry: str, is_dir: bool, backend: str,
                                     platform: str) -> None:
    version = tmp_path / "1"
    version.mkdir()
    if is_dir:
        (version / entry).mkdir()
    else:
        (version / entry).write_bytes(b"")
    config = ModelConfig()
    assert resolve_backend(config, "m", tmp_path) == backend
    assert config.platform == platform


def test_backend_from_default_model_filename() -> None:
    config = ModelConfig(default_model_filename="model.plan")
    assert resolve_backend(config, "m") == "tensorrt"
    assert config.platform == "tensorrt_plan"


def test_backend_from_the_model_name_as_triton_does() -> None:
    # Triton's custom-backend convention: a model "add.identity" uses backend "identity".
    config = ModelConfig()
    assert resolve_backend(config, "add.identity") == "identity"
    assert config.default_model_filename == "model.identity"
