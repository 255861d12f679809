"""The FIL backend's parameter rules and device choice, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.errors import InferenceServerError

pytest.importorskip("treelite", reason="treelite is not installed")
from naiad_backend_fil.backend import FilBackend
from naiad_backend_fil.parameters import parse


def config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def params(**values: str) -> ModelConfig:
    return config("".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                          for k, v in values.items()))


def test_defaults_are_fils():
    parsed = parse(params(output_class="false"), "m")
    assert (parsed.model_type, parsed.predict_proba, parsed.threshold) == ("xgboost", False, 0.5)
    assert parsed.cpu_nthread is None


@pytest.mark.parametrize(("values", "fragments"), [
    ({}, ["'output_class' is required"]),
    ({"output_class": "yes"}, ["'output_class'", '"true" or "false"', "'yes'"]),
    ({"output_class": "true", "threshold": "high"}, ["'threshold'", "'high'"]),
    ({"output_class": "true", "model_type": "onnx"}, ["'model_type'", "xgboost_json"]),
    ({"output_class": "true", "storage_type": "TINY"}, ["'storage_type'", "SPARSE8"]),
    ({"output_class": "true", "cpu_nthread": "0"}, ["'cpu_nthread'", "-1"]),
    ({"output_class": "true", "threads_per_tree": "-3"}, ["'threads_per_tree'", ">= 0"]),
])
def test_bad_parameters_fail_naming_the_model_and_the_parameter(values, fragments):
    with pytest.raises(InferenceServerError) as info:
        parse(params(**values), "forest")
    for fragment in ("model 'forest'", *fragments):
        assert fragment in info.value.message, info.value.message


def test_instance_groups_left_to_the_server_run_on_the_cpu(tmp_path: Path):
    backend = FilBackend()
    auto = config('name: "m" instance_group [ { kind: KIND_AUTO count: 2 } ]')
    assert backend.auto_complete_config(auto, tmp_path) == ["instance_group"]
    assert [(g.kind, g.count) for g in auto.instance_group] == [
        (ModelInstanceGroup.KIND_CPU, 2)]
    implicit = config('name: "m"')
    backend.auto_complete_config(implicit, tmp_path)
    assert [(g.name, g.kind) for g in implicit.instance_group] == [
        ("m", ModelInstanceGroup.KIND_CPU)]
    explicit = config('name: "m" instance_group [ { kind: KIND_GPU } ]')
    assert backend.auto_complete_config(explicit, tmp_path) == []  # refused at load instead
