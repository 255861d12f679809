"""naiad convert end to end: a small MLP and CNN built in the test (random weights) are
converted by the real command; the repositories it writes are served by a real naiad serve
(ONNX Runtime and PyTorch backends), and tritonclient's answers over HTTP and gRPC equal the
original model's within the tolerance the report gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from convert_helpers import QUICK, entry, report, statuses
from google.protobuf import text_format
from naiad_convert.cli import main
from tiny_models import MLP, NoOnnx, make_cnn
from tritonclient.grpc import model_config_pb2

from naiad.testing import naiad_server

SERVED_BATCH = 3  # a batch size no check or timing used
TORCH_FORMATS = ("torchscript-trace", "torchscript-script", "torch-export")


def config_of(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(),
                             model_config_pb2.ModelConfig())


@pytest.fixture(scope="module")
def onnx_source_run(mlp_run: Path, convert_root: Path) -> Path:
    """An ONNX file as the source (the MLP's own export), samples from a .npz file."""
    samples = convert_root / "mlp-samples.npz"
    np.savez(samples, x=np.random.default_rng(1).normal(size=(3, 16)).astype(np.float32))
    out = convert_root / "from-onnx"
    assert main([str(mlp_run / "formats" / "onnx" / "model.onnx"), "--samples", str(samples),
                 "--formats", "onnx", "-o", str(out), "--model-name", "mlp_onnx", *QUICK]) == 0
    return out


def test_the_mlp_run_checks_times_and_serves_each_format(mlp_run):
    data = report(mlp_run)
    assert statuses(data) == {"torchscript-script": "passed", "onnx": "passed"}
    for fmt in data["formats"]:
        assert [c["name"] for c in fmt["checks"]] == ["OUTPUT__0"]
        assert all(c["passed"] and c["max_abs_error"] <= 1e-5 for c in fmt["checks"])
        assert [t["batch_size"] for t in fmt["timings"]] == [1, 4]
        assert all(t["throughput"] > 0 and t["p99_ms"] >= t["p50_ms"] > 0
                   for t in fmt["timings"])
        assert not fmt["served_error"], fmt["served_error"]
        assert [(s["batch_size"], s["concurrency"]) for s in fmt["served"]] == [(2, 1)]
        assert fmt["served"][0]["throughput"] > 0 and fmt["served"][0]["errors"] == 0
        folder = mlp_run / "formats" / fmt["name"]
        assert (folder / "check.json").is_file()
        assert "naiad convert" in (folder / "reproduce.sh").read_text()
    best = max(data["formats"], key=lambda f: f["served"][0]["throughput"])
    assert data["winner"] == best["name"]


def test_the_repository_names_dtypes_dims_batching_and_warmup(mlp_run):
    data = report(mlp_run)
    model_dir = mlp_run / "repository" / "mlp"
    config = config_of(model_dir)
    platform = {"onnx": "onnxruntime_onnx", "torchscript-script": "pytorch_libtorch"}
    assert config.platform == platform[data["winner"]]
    assert config.max_batch_size == 4
    assert [(i.name, list(i.dims)) for i in config.input] == [("x", [16])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT__0", [4])]
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    # served at batch 2 only: the served figures decide the preferred size
    assert data["preferred_batch_size"] == 2
    assert list(config.dynamic_batching.preferred_batch_size) == [2]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    warmup = config.model_warmup[0].inputs["x"]
    raw = (model_dir / "warmup" / warmup.input_data_file).read_bytes()
    assert len(raw) == 16 * 4
    assert [p.name for p in (model_dir / "1").iterdir()] == [
        "model.onnx" if data["winner"] == "onnx" else "model.pt"]


def test_the_cnn_goes_to_every_format_and_tensorrt_says_why_not(cnn_run):
    data = report(cnn_run)
    assert statuses(data) == {**dict.fromkeys(TORCH_FORMATS, "passed"), "onnx": "passed",
                              "tensorrt": "skipped"}
    tensorrt = next(f for f in data["formats"] if f["name"] == "tensorrt")
    assert "TensorRT is not installed" in tensorrt["reason"] or "GPU" in tensorrt["reason"]
    assert data["winner"] == "torch-export"
    config = config_of(cnn_run / "repository" / "cnn")
    assert config.platform == "pytorch_libtorch"
    assert config.default_model_filename == "model.pt2"
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT__0", [5]),
                                                                 ("OUTPUT__1", [8])]


def test_an_onnx_file_is_a_source(onnx_source_run):
    data = report(onnx_source_run)
    assert data["source_kind"] == "onnx"
    assert statuses(data) == {"onnx": "passed"}
    assert config_of(onnx_source_run / "repository" / "mlp_onnx").platform == "onnxruntime_onnx"


def test_tritonclient_answers_equal_the_original(mlp_run, cnn_run, onnx_source_run,
                                                 no_onnx_run, tmp_path):
    repository = tmp_path / "models"
    for run in (mlp_run, cnn_run, onnx_source_run, no_onnx_run):
        for model in (run / "repository").iterdir():
            shutil.copytree(model, repository / model.name)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(SERVED_BATCH, 16)).astype(np.float32)
    image = rng.normal(size=(SERVED_BATCH, 3, 8, 8)).astype(np.float32)
    x4 = rng.normal(size=(SERVED_BATCH, 4)).astype(np.float32)
    with torch.inference_mode():
        mlp_want = MLP().eval()(torch.from_numpy(x)).numpy()
        no_onnx_want = NoOnnx().eval()(torch.from_numpy(x4)).numpy()
        cnn_want = [t.numpy() for t in make_cnn().eval()(torch.from_numpy(image))]
    cases = {"mlp": ("x", x, {"OUTPUT__0": mlp_want}, report(mlp_run)),
             "mlp_onnx": ("x", x, {"OUTPUT__0": mlp_want}, report(onnx_source_run)),
             "no_onnx": ("x", x4, {"OUTPUT__0": no_onnx_want}, report(no_onnx_run)),
             "cnn": ("image", image, {"OUTPUT__0": cnn_want[0], "OUTPUT__1": cnn_want[1]},
                     report(cnn_run))}
    with naiad_server("--model-repository", str(repository)) as server:
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            client = module.InferenceServerClient(url)
            for model, (name, array, want, data) in cases.items():
                given = module.InferInput(name, list(array.shape), "FP32")
                given.set_data_from_numpy(array)
                result = client.infer(model, [given])
                tolerance = data["tolerance"]
                for output, expected in want.items():
                    np.testing.assert_allclose(result.as_numpy(output), expected,
                                               atol=tolerance["atol"], rtol=tolerance["rtol"],
                                               err_msg=f"{model} {output} over {module.__name__}")
            client.close()


@pytest.mark.parametrize(("file", "formats", "expected"), [
    ("torchscript-script/model.pt", "torchscript-trace,torchscript-script,onnx",
     {"torchscript-trace": ("skipped", "tracing needs an nn.Module"),
      "torchscript-script": ("passed", "matches the original"),
      "onnx": ("passed", "matches the original")}),
    ("torch-export/model.pt2", "torch-export,onnx",
     {"torch-export": ("passed", "matches the original"),
      "onnx": ("skipped", "use --onnx-exporter dynamo")}),
])
def test_torchscript_and_export_files_are_sources(cnn_run, tmp_path, file, formats, expected):
    out = tmp_path / "out"
    assert main([str(cnn_run / "formats" / file), "--input", "image:FP32:batch,3,8,8", "-o",
                 str(out), "--formats", formats, *QUICK]) == 0
    data = report(out)
    assert data["source_kind"] == ("torchscript" if file.endswith(".pt") else "torch.export")
    found = {f["name"]: (f["status"], f["reason"]) for f in data["formats"]}
    assert set(found) == set(expected)
    for name, (status, reason) in expected.items():
        assert found[name][0] == status and reason in found[name][1], found[name]


def test_perf_analyzer_json_samples(tmp_path):
    data = tmp_path / "samples.json"
    rows = np.random.default_rng(3).normal(size=(3, 16)).round(3)
    data.write_text(json.dumps({"data": [{"x": row.tolist()} for row in rows]}))
    out = tmp_path / "out"
    assert main([entry("MLP"), "--samples", str(data), "--input", "x:FP32:batch,16",
                 "--formats", "onnx", "-o", str(out), *QUICK]) == 0
    result = report(out)
    assert result["inputs"] == [{"name": "x", "datatype": "FP32", "dims": [16]}]
    assert statuses(result) == {"onnx": "passed"}
