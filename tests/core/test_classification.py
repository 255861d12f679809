"""naiad.classification on its own: ranking per batch entry, Triton's number formatting,
labels (an empty line gives none, a file outside the model's folder is never read), and the
refusals naming the model and output. The same answers against the real Triton:
tests/compat/test_compat_classification.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.classification import class_count, classify, classify_response
from naiad.errors import InferenceServerError
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


def tensor(data: np.ndarray, datatype: str = "FP32") -> Tensor:
    return Tensor("OUT", datatype, data.shape, data)


def strings(t: Tensor) -> list[str]:
    return [b.decode() for b in t.data.flatten()]


def test_each_batch_entry_is_ranked_on_its_own() -> None:
    data = np.array([[0.1, 0.9, 0.5], [3.0, 1.0, 2.0]], np.float32)
    out = classify("m", tensor(data), 2, ["a", "b", "c"], batching=True)
    assert out.datatype == "BYTES" and out.shape == (2, 2)
    assert strings(out) == ["0.900000:1:b", "0.500000:2:c", "3.000000:0:a", "2.000000:2:c"]


def test_without_batching_the_whole_tensor_is_one_ranking() -> None:
    data = np.array([[4, 40], [-7, 12]], np.int32)
    out = classify("m", tensor(data, "INT32"), 3, [], batching=False)
    assert out.shape == (3,) and strings(out) == ["40:1", "12:3", "4:0"]


def test_ties_keep_index_order_and_a_large_count_gives_everything() -> None:
    data = np.array([[1.0, 2.0, 2.0]], np.float64)
    assert strings(classify("m", tensor(data, "FP64"), 10, [], batching=True)) == [
        "2.000000:1", "2.000000:2", "1.000000:0"]


def test_an_empty_label_line_or_a_missing_one_leaves_the_label_out() -> None:
    data = np.array([[3.0, 2.0, 1.0]], np.float32)
    assert strings(classify("m", tensor(data), 3, ["x", ""], batching=True)) == [
        "3.000000:0:x", "2.000000:1", "1.000000:2"]


@pytest.mark.parametrize("value", [0, -1, "3", 2.5, True])
def test_a_class_count_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(InferenceServerError, match="output 'OUT' of model 'm'"):
        class_count("m", "OUT", value)


@pytest.mark.parametrize("datatype", ["BYTES", "BOOL"])
def test_outputs_that_cannot_be_ranked_are_refused(datatype: str) -> None:
    data = np.array([b"a", b"b"], object) if datatype == "BYTES" else np.array([True, False])
    with pytest.raises(InferenceServerError, match=f"needs a numeric output, not {datatype}"):
        classify("m", tensor(data, datatype), 1, [], batching=False)


def model(tmp_path: Path, label_filename: str) -> SimpleNamespace:
    config = text_format.Parse(
        f'name: "m" max_batch_size: 4 output [{{ name: "OUT" data_type: TYPE_FP32 '
        f'dims: [ 3 ] label_filename: "{label_filename}" }}]', ModelConfig())
    return SimpleNamespace(name="m", config=config,
                           context=SimpleNamespace(model_dir=tmp_path / "m"))


def request(count: int | None) -> InferenceRequest:
    wanted = [RequestedOutput("OUT", {} if count is None else {"classification": count})]
    return InferenceRequest("m", 1, {}, requested_outputs=wanted)


def test_labels_come_from_the_output_s_label_file(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "labels.txt").write_text("cat\ndog\nbird\n")
    response = InferenceResponse([tensor(np.array([[0.2, 0.7, 0.1]], np.float32))])
    out = classify_response(model(tmp_path, "labels.txt"), request(1), response)
    assert strings(out.outputs[0]) == ["0.700000:1:dog"]


def test_a_label_file_outside_the_model_folder_is_never_read(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "secret.txt").write_text("leaked\n")
    response = InferenceResponse([tensor(np.array([[0.9, 0.1, 0.0]], np.float32))])
    out = classify_response(model(tmp_path, "../secret.txt"), request(1), response)
    assert strings(out.outputs[0]) == ["0.900000:0"]


def test_a_request_without_classification_is_left_alone(tmp_path: Path) -> None:
    response = InferenceResponse([tensor(np.array([[0.9, 0.1, 0.0]], np.float32))])
    assert classify_response(model(tmp_path, ""), request(None), response) is response
    assert response.outputs[0].datatype == "FP32"
