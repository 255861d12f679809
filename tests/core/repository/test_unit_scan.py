"""Unit tests of naiad.repository.scan: model folders, version folders, version policies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelVersionPolicy

from naiad.errors import InferenceServerError, Status
from naiad.repository.scan import (
    available_versions,
    model_config_versions,
    model_folders,
    scheme_of,
    select_versions,
)


def policy(text: str) -> ModelVersionPolicy:
    return text_format.Parse(text, ModelVersionPolicy())


def mkdirs(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
    return root


def test_scheme_of_plain_path_is_file_and_uri_gives_its_scheme():
    assert scheme_of("/models") == "file"
    assert scheme_of("relative/models") == "file"
    assert scheme_of("s3://bucket/models") == "s3"
    assert scheme_of("gs://bucket") == "gs"


def test_model_folders_lists_visible_directories_sorted_by_name(tmp_path):
    mkdirs(tmp_path, "zeta", "alpha", ".hidden", ".git/objects", "mid")
    (tmp_path / "README.md").write_text("not a model")
    folders = model_folders(tmp_path)
    assert list(folders) == ["alpha", "mid", "zeta"]
    assert folders["alpha"] == tmp_path / "alpha"


def test_model_folders_of_empty_repository_is_empty(tmp_path):
    assert model_folders(tmp_path) == {}


def test_available_versions_are_positive_integer_folders_ascending(tmp_path):
    mkdirs(tmp_path, "10", "2", "1", "0", "v3", "latest", ".4", "-5", "1.5")
    (tmp_path / "7").write_text("a file named like a version is not a version")
    assert available_versions(tmp_path) == [1, 2, 10]


def test_available_versions_reads_leading_zeros_as_numbers(tmp_path):
    mkdirs(tmp_path, "007")
    assert available_versions(tmp_path) == [7]


def test_available_versions_ignores_unicode_digit_folder_names(tmp_path):
    mkdirs(tmp_path, "1", "²")
    assert available_versions(tmp_path) == [1]


def test_select_versions_without_policy_serves_the_latest_one():
    assert select_versions("m", [1, 2, 3], ModelVersionPolicy()) == [3]


def test_select_versions_latest_n_serves_the_n_highest():
    assert select_versions("m", [1, 2, 3], policy("latest { num_versions: 2 }")) == [2, 3]


def test_select_versions_latest_n_beyond_available_serves_all():
    assert select_versions("m", [4, 9], policy("latest { num_versions: 5 }")) == [4, 9]


def test_select_versions_latest_zero_is_an_error_naming_the_model():
    with pytest.raises(InferenceServerError) as info:
        select_versions("resnet", [1, 2], policy("latest { num_versions: 0 }"))
    assert info.value.status is Status.INVALID_ARG
    assert "resnet" in info.value.message
    assert "num_versions" in info.value.message


def test_select_versions_all_serves_every_version():
    assert select_versions("m", [1, 2, 5], policy("all {}")) == [1, 2, 5]


def test_select_versions_specific_serves_named_versions_sorted():
    chosen = select_versions("m", [1, 2, 3], policy("specific { versions: [3, 1] }"))
    assert chosen == [1, 3]


def test_select_versions_specific_logs_missing_versions_and_serves_the_others(caplog):
    with caplog.at_level(logging.ERROR, logger="naiad.repository"):
        chosen = select_versions("resnet", [1, 2], policy("specific { versions: [2, 7] }"))
    assert chosen == [2]
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("resnet" in m and "7" in m for m in messages), messages


def test_select_versions_specific_with_no_version_present_is_an_error():
    with pytest.raises(InferenceServerError) as info:
        select_versions("resnet", [1, 2], policy("specific { versions: [5, 6] }"))
    assert info.value.status is Status.INVALID_ARG
    message = info.value.message
    assert "resnet" in message and "5" in message and "6" in message
    assert "[1, 2]" in message


def test_model_config_versions_applies_the_config_policy(tmp_path):
    mkdirs(tmp_path, "1", "2", "3")
    config = text_format.Parse("version_policy { latest { num_versions: 2 } }", ModelConfig())
    assert model_config_versions("m", tmp_path, config) == [2, 3]


def test_model_config_versions_without_version_folder_is_an_error_naming_the_model(tmp_path):
    mkdirs(tmp_path, "0", "weights")
    (tmp_path / "config.pbtxt").write_text("")
    with pytest.raises(InferenceServerError) as info:
        model_config_versions("resnet", tmp_path, ModelConfig())
    assert info.value.status is Status.INVALID_ARG
    assert "resnet" in info.value.message
    assert "version folder" in info.value.message
