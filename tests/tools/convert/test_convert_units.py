"""naiad convert's parts without a model: input specs, sample files, the comparison, the
config it writes, the batch sizes it times, the progress file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import text_format
from naiad_convert.check import Tolerance, compare, merge
from naiad_convert.errors import EXIT_USAGE, ConvertError
from naiad_convert.repository import config_text
from naiad_convert.samples import InputArg, load_perf_json, load_samples, parse_input_arg
from naiad_convert.serving import write_perf_json
from naiad_convert.state import PASSED, FormatResult, Progress
from naiad_convert.tensors import TensorSpec
from naiad_convert.timing import BatchTiming, batch_sizes_up_to
from tritonclient.grpc import model_config_pb2


def test_an_input_spec_names_its_batch_axis():
    assert parse_input_arg("image:fp32:batch,3,8,8") == InputArg("image", "FP32", (3, 8, 8),
                                                                 "batch")
    assert parse_input_arg("ids:TYPE_INT64:-1,7") == InputArg("ids", "INT64", (7,), "batch")
    assert parse_input_arg("x:FP16:4") == InputArg("x", "FP16", (4,), None)


@pytest.mark.parametrize(("text", "expected"), [
    ("x:FP32", "expected NAME:DATATYPE:DIMS"),
    ("x:FLOAT:batch,4", "datatype 'FLOAT' is not one of"),
    ("x:FP32:batch,n,4", "only the first dimension may be a name"),
    ("x:FP32:batch,-1", "must be sizes >= 1"),
])
def test_a_bad_input_spec_says_what_is_expected(text, expected):
    with pytest.raises(ConvertError) as caught:
        parse_input_arg(text)
    assert caught.value.status == EXIT_USAGE and expected in str(caught.value)


def test_generated_samples_have_the_batch_axis_and_types():
    samples = load_samples(None, [parse_input_arg("x:FP32:batch,3"),
                                  parse_input_arg("ids:INT64:batch,2")], batched=True)
    assert samples.rows == 4
    assert samples.arrays["x"].dtype == np.float32 and samples.arrays["x"].shape == (4, 3)
    assert samples.arrays["ids"].dtype == np.int64
    assert [s.dims for s in samples.specs()] == [(3,), (2,)]
    assert samples.at_batch(6)["x"].shape == (6, 3)
    np.testing.assert_array_equal(samples.at_batch(6)["x"][4], samples.arrays["x"][0])


def test_perf_analyzer_json_round_trips(tmp_path):
    samples = load_samples(None, [parse_input_arg("x:FP32:batch,2,3")], batched=True)
    path = tmp_path / "data.json"
    write_perf_json(samples, path)
    assert len(json.loads(path.read_text())["data"]) == 4
    again = load_perf_json(path, [])
    np.testing.assert_array_equal(again["x"], samples.arrays["x"])


def test_perf_analyzer_json_with_flat_lists_takes_the_input_spec(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"data": [{"ids": [1, 2, 3, 4]}, {"ids": [5, 6, 7, 8]}]}))
    arrays = load_perf_json(path, [parse_input_arg("ids:INT32:batch,2,2")])
    assert arrays["ids"].dtype == np.int32 and arrays["ids"].shape == (2, 2, 2)
    with pytest.raises(ConvertError, match="step 0, input 'ids': 4 values do not fill"):
        load_perf_json(path, [parse_input_arg("ids:INT32:batch,3")])


def test_npz_samples_must_agree_on_the_batch_axis(tmp_path):
    path = tmp_path / "s.npz"
    np.savez(path, a=np.zeros((2, 3), np.float32), b=np.zeros((3, 3), np.float32))
    with pytest.raises(ConvertError, match="disagree on the batch axis"):
        load_samples(path, [], batched=True)


def test_compare_gives_the_largest_errors_and_the_verdict():
    want = {"y": np.array([1.0, 2.0, -4.0], np.float32)}
    got = {"y": np.array([1.0, 2.001, -4.0], np.float32)}
    [check] = compare(want, got, Tolerance(atol=1e-5, rtol=1e-4))
    assert not check.passed
    assert check.max_abs_error == pytest.approx(0.001, rel=1e-3)
    assert check.max_rel_error == pytest.approx(0.0005, rel=1e-3)
    [loose] = compare(want, got, Tolerance(atol=1e-2, rtol=0))
    assert loose.passed
    [missing] = compare(want, {}, Tolerance())
    assert not missing.passed and "missing" in missing.problem
    [shape] = compare(want, {"y": np.zeros(2, np.float32)}, Tolerance())
    assert "shape [2], expected [3]" in shape.problem
    [dtype] = compare(want, {"y": want["y"].astype(np.float64)}, Tolerance())
    assert not dtype.passed and "dtype float64" in dtype.problem
    merged = merge([[loose], [check]])
    assert not merged[0].passed and merged[0].max_abs_error == check.max_abs_error


def test_the_config_is_triton_s_model_config():
    text = config_text("m", "onnxruntime_onnx", "model.onnx",
                       [TensorSpec("x", "FP32", (3,))], [TensorSpec("OUTPUT__0", "INT64", (2,))],
                       8, 4, warmup=True)
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert config.max_batch_size == 8 and config.platform == "onnxruntime_onnx"
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert config.output[0].data_type == model_config_pb2.TYPE_INT64
    assert config.model_warmup[0].inputs["x"].input_data_file == "input0"
    assert not config.default_model_filename
    exported = text_format.Parse(
        config_text("m", "pytorch_libtorch", "model.pt2", [], [], 0, None, warmup=False),
        model_config_pb2.ModelConfig())
    assert exported.default_model_filename == "model.pt2"
    assert not exported.HasField("dynamic_batching")


def test_batch_sizes_are_powers_of_two_and_the_largest():
    assert batch_sizes_up_to(16) == (1, 2, 4, 8, 16)
    assert batch_sizes_up_to(12) == (1, 2, 4, 8, 12)
    assert batch_sizes_up_to(1) == (1,)
    assert batch_sizes_up_to(0) == (1,)


def test_progress_round_trips_and_refuses_another_run(tmp_path):
    progress = Progress.open(tmp_path, {"source": "a"})
    result = progress.result("onnx")
    result.status = PASSED
    result.timings = [BatchTiming(4, 100.0, 1.0, 2.0, 10, True)]
    progress.save()
    again = Progress.open(tmp_path, {"source": "a"})
    assert again.results["onnx"].to_json() == result.to_json()
    assert isinstance(again.results["onnx"], FormatResult)
    with pytest.raises(ConvertError, match="it differs in source"):
        Progress.open(tmp_path, {"source": "b"})
    assert Progress.open(tmp_path, {"source": "b"}, restart=True).results == {}
