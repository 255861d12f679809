"""naiad.backend_utils: the helpers backends share, one implementation each."""

from __future__ import annotations

import naiad.batching
import naiad.config.render
import naiad.datatypes
import naiad.gpus
from naiad import backend_utils
from naiad.backend_utils import newest_version_file, version_folders
from naiad.repository.scan import available_versions


def test_helpers_the_core_uses_are_the_core_s_own_functions():
    # Re-exported, not copied: a backend and the core cannot drift apart.
    for name, module in (("batch_sizes", naiad.batching), ("merge_inputs", naiad.batching),
                         ("split_outputs", naiad.batching),
                         ("config_to_datatype", naiad.datatypes),
                         ("datatype_to_config", naiad.datatypes),
                         ("NUMPY_DTYPES", naiad.datatypes),
                         ("config_to_json", naiad.config.render),
                         ("gpu_count", naiad.gpus),
                         ("format_shape", naiad.datatypes)):
        assert getattr(backend_utils, name) is getattr(module, name), name


def test_version_folders_are_the_core_s_versions_newest_first(tmp_path):
    for name in ("1", "3", "10", "0", "notes", "²"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version folder")
    assert version_folders(tmp_path) == [tmp_path / "10", tmp_path / "3", tmp_path / "1"]
    assert [int(p.name) for p in reversed(version_folders(tmp_path))] == \
        available_versions(tmp_path)


def test_version_folders_of_a_missing_model_folder_are_none(tmp_path):
    assert version_folders(tmp_path / "missing") == []
    (tmp_path / "file").write_text("")
    assert version_folders(tmp_path / "file") == []


def test_newest_version_file_skips_versions_without_it(tmp_path):
    for version, has_file in (("1", True), ("3", True), ("10", False), ("notes", True)):
        (tmp_path / version).mkdir()
        if has_file:
            (tmp_path / version / "model.plan").write_bytes(b"engine")
    (tmp_path / "10" / "model.plan").mkdir()  # a folder of that name is not the file
    assert newest_version_file(tmp_path, "model.plan") == tmp_path / "3" / "model.plan"
    assert newest_version_file(tmp_path, "other.plan") is None
    assert newest_version_file(tmp_path / "missing", "model.plan") is None


def test_auto_groups_run_on_the_cpu_and_explicit_ones_are_left():
    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

    from naiad.backend_utils import run_auto_groups_on_cpu

    bare = ModelConfig(name="m")
    assert run_auto_groups_on_cpu(bare, "m") == ["instance_group"]
    assert [(g.name, g.kind) for g in bare.instance_group] == [
        ("m", ModelInstanceGroup.KIND_CPU)]
    mixed = text_format.Parse('instance_group [ { count: 2 }, { kind: KIND_GPU } ]',
                              ModelConfig(name="m"))
    assert run_auto_groups_on_cpu(mixed, "m") == ["instance_group"]
    assert [g.kind for g in mixed.instance_group] == [ModelInstanceGroup.KIND_CPU,
                                                      ModelInstanceGroup.KIND_GPU]
    assert run_auto_groups_on_cpu(mixed, "m") == []  # nothing left to change
    ensemble = ModelConfig(name="e", platform="ensemble")
    assert run_auto_groups_on_cpu(ensemble, "e") == [] and not ensemble.instance_group


def test_unsupported_features_are_refused_by_name():
    import pytest
    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.backend_utils import refuse_unsupported_features
    from naiad.errors import InferenceServerError, Status

    refuse_unsupported_features(ModelConfig(name="m"), "m", "x", {"y": False})
    used = text_format.Parse(
        'model_transaction_policy { decoupled: true } '
        'input [ { name: "I" allow_ragged_batch: true } ]', ModelConfig(name="m"))
    with pytest.raises(InferenceServerError) as refused:
        refuse_unsupported_features(used, "m", "openvino", {"XLA": True})
    assert refused.value.status is Status.UNSUPPORTED
    assert str(refused.value) == ("model 'm' uses allow_ragged_batch, decoupled mode, XLA, "
                                  "which naiad's openvino backend does not support")
