"""Tree ensembles served by a real ``naiad serve`` with the fil backend, called with
tritonclient over HTTP and gRPC; every answer is compared with XGBoost, LightGBM or
scikit-learn called directly on the same rows."""

from __future__ import annotations

import os
import queue
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from fil_helpers import (
    FEATURES,
    Served,
    build_repository,
    config,
    samples,
    training_data,
    widen,
    xgb,
)
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

pytest.importorskip("naiad_backend_fil", reason="naiad-backend-fil is not installed")
onnx = pytest.importorskip("onnx", reason="onnx is not installed (for the ensemble step)")

PROTOCOLS = ("http", "grpc")
CLIENTS = {"http": httpclient, "grpc": grpcclient}
CONCURRENT = 6

# Models that must fail their load, each with what the reason must say.
BROKEN = {
    "no_output_class": ("parameter 'output_class' is required",),
    "wrong_format": ("cannot read", "xgboost.json", "xgboost_json"),
    "wrong_features": ("input 'input__0'", "6 features", "[ 6 ]"),
    "wrong_columns": ("output 'output__0'", "[ 3 ]"),
    "shap_output": ("treeshap_output", "not supported"),
    "missing_file": ("no model file", "checkpoint.tl"),
    "bad_model_type": ("model_type", "xgboost_ubj", "'catboost'"),
}


def write_broken(repo: Path) -> None:
    x, binary, three, _ = training_data()
    clf = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(x, binary)
    multi = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(x, three)

    def model(name: str, filename: str, text: str, booster=clf) -> None:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
        if filename:
            booster.save_model(str(repo / name / "1" / filename))

    model("no_output_class", "xgboost.json",
          config("no_output_class", "xgboost_json", True, 1).replace(
              'parameters { key: "output_class" value: { string_value: "true" } }', ""))
    # UBJSON bytes where the config promises JSON.
    model("wrong_format", "", config("wrong_format", "xgboost_json", True, 1))
    clf.save_model(str(repo / "wrong_format" / "1" / "x.ubj"))
    (repo / "wrong_format" / "1" / "x.ubj").rename(repo / "wrong_format" / "1" / "xgboost.json")
    model("wrong_features", "xgboost.json",
          config("wrong_features", "xgboost_json", True, 1).replace(
              f"dims: [ {FEATURES} ]", "dims: [ 4 ]"))
    model("wrong_columns", "xgboost.json",
          config("wrong_columns", "xgboost_json", True, 1, predict_proba=True), booster=multi)
    model("shap_output", "xgboost.json",
          config("shap_output", "xgboost_json", True, 1).replace(
              "output [ {", 'output [ { name: "treeshap_output" data_type: TYPE_FP32 '
                           'dims: [ 7 ] }, {'))
    model("missing_file", "", config("missing_file", "treelite_checkpoint", True, 1))
    model("bad_model_type", "xgboost.json", config("bad_model_type", "catboost", True, 1))


def write_ensemble(repo: Path) -> None:
    """An ONNX step that scales the features, then the FIL regressor: the ensemble's answer
    is the regressor's on the scaled rows (the ONNX model batches up to 4, its default)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT", "two"], ["SCALED"])], "scale",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [None, FEATURES])],
        [helper.make_tensor_value_info("SCALED", TensorProto.FLOAT, [None, FEATURES])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    (repo / "scale" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(repo / "scale" / "1" / "model.onnx"))
    (repo / "scaled_regression" / "1").mkdir(parents=True)
    (repo / "scaled_regression" / "config.pbtxt").write_text(f"""
name: "scaled_regression"
platform: "ensemble"
max_batch_size: 4
input [ {{ name: "ROWS" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "PREDICTION" data_type: TYPE_FP32 dims: [ 1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "scale" model_version: -1
     input_map {{ key: "INPUT" value: "ROWS" }} output_map {{ key: "SCALED" value: "S" }} }},
  {{ model_name: "xgb_regressor" model_version: -1
     input_map {{ key: "input__0" value: "S" }}
     output_map {{ key: "output__0" value: "PREDICTION" }} }}
] }}
""")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Served]]:
    root = tmp_path_factory.mktemp("fil_repo")
    models = build_repository(root)
    # Concurrent requests wait up to a second for company: one execution answers them all.
    batched = root / "xgb_multi_proba_batched"
    batched.mkdir()
    (batched / "1").symlink_to(root / "xgb_multi_proba" / "1")
    (batched / "config.pbtxt").write_text(
        config("xgb_multi_proba_batched", "xgboost_json", True, 3, predict_proba=True,
               extra="dynamic_batching { max_queue_delay_microseconds: 1000000 "
                     f"preferred_batch_size: [ {CONCURRENT} ] }}\n"
                     "response_cache { enable: true }\n"
                     'model_warmup [ { name: "zeros" batch_size: 4 inputs { key: "input__0" '
                     f"value: {{ data_type: TYPE_FP32 dims: [ {FEATURES} ] "
                     "zero_data: true } } } ]\n"))
    write_broken(root)
    write_ensemble(root)
    return root, models


@pytest.fixture(scope="module")
def server(repo: tuple[Path, dict[str, Served]]) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo[0]), "--model-control-mode", "explicit",
                      "--load-model", "*", "--exit-on-error=false",
                      "--strict-readiness=false",
                      "--cache-config", "local,size=1048576") as process:
        yield process


def client(server: ServerProcess, protocol: str):
    url = server.http_url if protocol == "http" else server.grpc_url
    return CLIENTS[protocol].InferenceServerClient(url)


def infer(server: ServerProcess, protocol: str, model: str, rows: np.ndarray) -> np.ndarray:
    module = CLIENTS[protocol]
    tensor = module.InferInput("input__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    with client(server, protocol) as c:
        return c.infer(model, [tensor]).as_numpy("output__0")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("rows", [1, 7])
def test_every_format_answers_as_its_framework(server, repo, protocol, rows):
    models = repo[1]
    x = samples(rows, seed=rows)
    for name, served in models.items():
        rows_in = x if served.features == FEATURES else widen(x)
        got = infer(server, protocol, name, rows_in)
        want = served.expected(x)
        assert got.dtype == np.float32, name
        # FIL's shapes: [batch] for dims [1] (FIL squeezes them), [batch, n] otherwise.
        assert got.shape == want.shape, (name, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_config_and_metadata_keep_fils_names(server):
    with client(server, "grpc") as c:
        cfg = c.get_model_config("xgb_multi_proba").config
        assert cfg.backend == "fil"
        assert [(t.name, list(t.dims)) for t in cfg.input] == [("input__0", [FEATURES])]
        assert [(t.name, list(t.dims)) for t in cfg.output] == [("output__0", [3])]
        meta = c.get_model_metadata("xgb_regressor")
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
            ("input__0", "FP32", [-1, FEATURES])]


def test_concurrent_requests_are_predicted_together(server, repo):
    name = "xgb_multi_proba_batched"
    expected = repo[1]["xgb_multi_proba"].expected  # the same model file
    answers: queue.Queue = queue.Queue()
    sent = {}
    with client(server, "grpc") as c:
        before = c.get_inference_statistics(name).model_stats[0]
        for i in range(CONCURRENT):
            x = samples(1, seed=100 + i)
            sent[i] = x
            tensor = grpcclient.InferInput("input__0", [1, FEATURES], "FP32")
            tensor.set_data_from_numpy(x)
            c.async_infer(name, [tensor],
                          callback=lambda result, error, i=i: answers.put((i, result, error)))
        for _ in range(CONCURRENT):
            i, result, error = answers.get(timeout=60)
            assert error is None, error
            np.testing.assert_allclose(result.as_numpy("output__0"), expected(sent[i]),
                                       rtol=1e-5, atol=1e-6)
        after = c.get_inference_statistics(name).model_stats[0]
    assert after.inference_count - before.inference_count == CONCURRENT
    assert after.execution_count - before.execution_count == 1


def test_the_response_cache_answers_a_repeated_request(server, repo):
    name = "xgb_multi_proba_batched"
    x = samples(2, seed=7)
    with client(server, "http") as c:
        first = infer(server, "http", name, x)
        again = infer(server, "http", name, x)
        stats = c.get_inference_statistics(name)["model_stats"][0]["inference_stats"]
    np.testing.assert_array_equal(first, again)
    assert stats["cache_hit"]["count"] >= 1, stats


def test_an_ensemble_feeds_an_onnx_step_into_a_forest(server, repo):
    x = samples(3, seed=11)
    want = repo[1]["xgb_regressor"].expected(x * 2)
    for protocol in PROTOCOLS:
        module = CLIENTS[protocol]
        tensor = module.InferInput("ROWS", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with client(server, protocol) as c:
            got = c.infer("scaled_regression", [tensor]).as_numpy("PREDICTION")
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rows_of_the_wrong_width_are_refused_and_the_model_keeps_serving(server, repo,
                                                                        protocol):
    with pytest.raises(InferenceServerException) as info:
        infer(server, protocol, "xgb_regressor", np.zeros((2, FEATURES + 1), np.float32))
    message = info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), info.value
    assert "xgb_regressor" in message and "input__0" in message, message
    x = samples(2)
    np.testing.assert_allclose(infer(server, protocol, "xgb_regressor", x),
                               repo[1]["xgb_regressor"].expected(x), rtol=1e-5, atol=1e-6)


def test_a_model_fil_cannot_serve_fails_its_load_saying_why(server):
    index = {m["name"]: m for m in client(server, "http").get_model_repository_index()}
    for name, fragments in BROKEN.items():
        entry = index[name]
        assert entry["state"] == "UNAVAILABLE", entry
        assert name in entry["reason"], entry
        for fragment in fragments:
            assert fragment in entry["reason"], (name, fragment, entry["reason"])


def test_unload_frees_the_model_and_load_brings_it_back(server, repo):
    name = "lightgbm_regressor"
    x = samples(3)
    with client(server, "http") as c:
        c.unload_model(name)
        assert not c.is_model_ready(name)
        with pytest.raises(InferenceServerException):
            infer(server, "http", name, x)
        c.load_model(name)
        assert c.is_model_ready(name)
    np.testing.assert_allclose(infer(server, "grpc", name, x), repo[1][name].expected(x),
                               rtol=1e-5, atol=1e-6)


def test_metrics_count_fil_inferences(server):
    infer(server, "http", "xgb_binary_ubj", samples(1))
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    line = re.search(r'nv_inference_count\{model="xgb_binary_ubj",version="1"\} (\d+)', text)
    assert line is not None and int(line.group(1)) >= 1, text[:2000]


def test_prediction_threads_follow_cpu_nthread_and_the_instance_count(server):
    log = server.log()
    # xgb_tuned sets cpu_nthread 1; the others share the cores among their one instance.
    assert re.search(r"model 'xgb_tuned' instance '[^']+': .* 1 prediction thread\b", log)
    cores = len(os.sched_getaffinity(0))
    threads = "1 prediction thread" if cores == 1 else f"{cores} prediction threads"
    assert re.search(rf"model 'xgb_regressor' instance '[^']+': .* {threads}", log), log[-3000:]
