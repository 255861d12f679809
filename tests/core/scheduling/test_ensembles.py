"""Ensembles end to end: tritonclient (HTTP and gRPC) against a real ``naiad serve``.

One server serves the example pipeline (add_sub -> mul), a fork/join ensemble over two slow
models, a batching ensemble, an ensemble with a failing step and ensembles that must fail to
load; a second server in explicit mode checks that loading an ensemble loads its steps'
models and that a step whose model was unloaded fails the request with the reason.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype
from zoo import BROKEN_INIT_PY, IDENTITY_PY, RAISES_PY, identity_config, write_model

from naiad.testing import naiad_server

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
PROTOCOLS = ["http", "grpc"]
INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}

# Sleeps, then answers OUTPUT0 = RESULT (an expression in x, filled in per model) with the
# wall-clock START and END of its execution, so a test can see whether two steps ran at the
# same time without timing anything itself.
STAMPED_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.time()
            time.sleep(0.3)
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", RESULT),
                pb_utils.Tensor("START", np.array([start], np.float64)),
                pb_utils.Tensor("END", np.array([time.time()], np.float64))]))
        return responses
"""


def stamped_config(name: str) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }},
  {{ name: "START", data_type: TYPE_FP64, dims: [ 1 ] }},
  {{ name: "END", data_type: TYPE_FP64, dims: [ 1 ] }}
]
"""


SCALE3_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 3)])
            for r in requests]
"""

# Waits up to 0.2 s to gather a batch of 8: concurrent ensemble requests share executions.
SCALE3_CONFIG = """
name: "scale3"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 2 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
"""


def ensemble_config(name: str, inputs: str, outputs: str, steps: list[str],
                    max_batch_size: int = 0, dims: str = "4") -> str:
    """An ensemble; ``inputs``/``outputs`` are ``NAME:TYPE`` or ``NAME:TYPE:DIMS`` lists
    (DIMS comma-separated, ``dims`` when left out)."""
    def tensors(spec: str) -> str:
        parts = [[*item.split(":"), dims][:3] for item in spec.split()]
        return ", ".join(f'{{ name: "{n}", data_type: TYPE_{t}, dims: [ {d} ] }}'
                         for n, t, d in parts)
    return f"""
name: "{name}"
platform: "ensemble"
max_batch_size: {max_batch_size}
input [ {tensors(inputs)} ]
output [ {tensors(outputs)} ]
ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
"""


def step(model: str, reads: dict[str, str], writes: dict[str, str]) -> str:
    """``reads``: model input -> ensemble tensor; ``writes``: model output -> ensemble tensor."""
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in reads.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in writes.items()]
    return f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'


ENSEMBLES = {
    # X -> (slow_double, slow_square) in parallel -> add_sub: Y = 2x + x*x
    "fork_join": ensemble_config(
        "fork_join", "X:FP32",
        "Y:FP32 START_A:FP64:1 END_A:FP64:1 START_B:FP64:1 END_B:FP64:1", [
            step("slow_double", {"INPUT0": "X"},
                 {"OUTPUT0": "doubled", "START": "START_A", "END": "END_A"}),
            step("slow_square", {"INPUT0": "X"},
                 {"OUTPUT0": "squared", "START": "START_B", "END": "END_B"}),
            step("add_sub", {"INPUT0": "doubled", "INPUT1": "squared"}, {"OUTPUT0": "Y"})]),
    "batched": ensemble_config("batched", "X:FP32", "Y:FP32",
                               [step("scale3", {"INPUT0": "X"}, {"OUTPUT0": "Y"})],
                               max_batch_size=8, dims="2"),
    # identity, then a model whose execute raises
    "fails_midway": ensemble_config(
        "fails_midway", "X:FP32", "Y:FP32",
        [step("identity", {"INPUT0": "X"}, {"OUTPUT0": "copy"}),
         step("raises", {"INPUT0": "copy"}, {"OUTPUT0": "Y"})], dims="-1"),
    # --- ensembles that must fail to load, each with its reason ---
    "bad_missing_model": ensemble_config(
        "bad_missing_model", "X:FP32", "Y:FP32",
        [step("no_such_model", {"INPUT0": "X"}, {"OUTPUT0": "Y"})], dims="-1"),
    "bad_cycle": ensemble_config(
        "bad_cycle", "X:FP32", "Y:FP32",
        [step("add_sub", {"INPUT0": "X", "INPUT1": "back"}, {"OUTPUT0": "Y", "OUTPUT1": "d"}),
         step("identity", {"INPUT0": "d"}, {"OUTPUT0": "back"})]),
    "bad_input_name": ensemble_config(
        "bad_input_name", "INPUT0:FP32 INPUT1:FP32", "Y:FP32",
        [step("add_sub", {"INPUT0": "INPUT0", "NOPE": "INPUT1"}, {"OUTPUT0": "Y"})]),
    "bad_datatype": ensemble_config(
        "bad_datatype", "X:INT32", "Y:FP32",
        [step("identity", {"INPUT0": "X"}, {"OUTPUT0": "Y"})], dims="-1"),
    # add_sub takes [4]; the ensemble hands it [3]
    "bad_shape": ensemble_config(
        "bad_shape", "INPUT0:FP32 INPUT1:FP32", "Y:FP32",
        [step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "Y"})],
        dims="3"),
    "bad_broken_step": ensemble_config(
        "bad_broken_step", "X:FP32", "Y:FP32",
        [step("broken_init", {"INPUT0": "X"}, {"OUTPUT0": "Y"})], dims="-1"),
}


def copy_examples(repo: Path, *names: str) -> None:
    for name in names:
        shutil.copytree(EXAMPLES / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ensembles")
    copy_examples(repo, "add_sub", "mul", "pipeline")
    write_model(repo, "slow_double", stamped_config("slow_double"),
                STAMPED_PY.replace("RESULT", "x * 2"))
    write_model(repo, "slow_square", stamped_config("slow_square"),
                STAMPED_PY.replace("RESULT", "x * x"))
    write_model(repo, "scale3", SCALE3_CONFIG, SCALE3_PY)
    write_model(repo, "identity", identity_config("identity", "TYPE_FP32"), IDENTITY_PY)
    write_model(repo, "raises", identity_config("raises", "TYPE_FP32"), RAISES_PY)
    write_model(repo, "broken_init", identity_config("broken_init", "TYPE_FP32"),
                BROKEN_INIT_PY)
    for name, config in ENSEMBLES.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


def client_for(server, protocol: str):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer(server, protocol: str, model: str, **arrays: np.ndarray):
    """One request to ``model`` with an input per keyword (datatype from the array)."""
    module = httpclient if protocol == "http" else grpcclient
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    with client_for(server, protocol) as client:
        return client.infer(model, tensors)


def fails(call, statuses: tuple[str, ...] | str, *fragments: str) -> str:
    """Assert ``call`` raises with one of ``statuses`` and a message holding ``fragments``."""
    with pytest.raises(InferenceServerException) as info:
        call()
    allowed = (statuses,) if isinstance(statuses, str) else statuses
    message = info.value.message()
    assert info.value.status() in allowed, (info.value.status(), message)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def stats(server, protocol: str, model: str) -> dict[str, int]:
    """A model's statistics as flat integers (gRPC's JSON writes uint64 as strings and
    leaves zeros out)."""
    with client_for(server, protocol) as client:
        if protocol == "http":
            found = client.get_inference_statistics(model)
        else:
            found = client.get_inference_statistics(model, as_json=True)
    model_stats = found["model_stats"][0]
    durations = model_stats.get("inference_stats", {})
    flat = {"inference_count": int(model_stats.get("inference_count", 0)),
            "execution_count": int(model_stats.get("execution_count", 0))}
    for kind in ("success", "fail", "queue", "compute_input", "compute_infer",
                 "compute_output"):
        flat[f"{kind}_count"] = int(durations.get(kind, {}).get("count", 0))
        flat[f"{kind}_ns"] = int(durations.get(kind, {}).get("ns", 0))
    return flat


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}


def vectors(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(4).astype(np.float32),
            rng.standard_normal(4).astype(np.float32))


# --- answers ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pipeline_answers_sum_times_difference(server, protocol):
    for seed in range(3):
        a, b = vectors(seed)
        result = infer(server, protocol, "pipeline", INPUT0=a, INPUT1=b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), (a + b) * (a - b))
        assert result.as_numpy("OUTPUT").dtype == np.float32


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_independent_steps_run_at_the_same_time(server, protocol):
    x, _ = vectors(7)
    result = infer(server, protocol, "fork_join", X=x)
    np.testing.assert_array_equal(result.as_numpy("Y"), x * 2 + x * x)
    start_a, end_a = result.as_numpy("START_A")[0], result.as_numpy("END_A")[0]
    start_b, end_b = result.as_numpy("START_B")[0], result.as_numpy("END_B")[0]
    assert start_a < end_a and start_b < end_b
    # run one after the other, one interval would end before the other started
    assert max(start_a, start_b) < min(end_a, end_b), (start_a, end_a, start_b, end_b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_batching_step_batches_concurrent_ensemble_requests(server, protocol):
    before = stats(server, protocol, "scale3")
    before_ensemble = stats(server, protocol, "batched")
    rows = [1 + i % 2 for i in range(8)]
    data = [np.full((r, 2), i, np.float32) for i, r in enumerate(rows)]
    with ThreadPoolExecutor(len(data)) as pool:
        results = list(pool.map(lambda d: infer(server, protocol, "batched", X=d), data))
    for d, result in zip(data, results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("Y"), d * 3)
    composing = delta(stats(server, protocol, "scale3"), before)
    assert composing["inference_count"] == sum(rows)
    assert composing["success_count"] == len(data)
    assert composing["execution_count"] < len(data), composing
    ensemble = delta(stats(server, protocol, "batched"), before_ensemble)
    assert ensemble["inference_count"] == sum(rows)
    assert ensemble["success_count"] == len(data)


# --- statistics --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_statistics_add_up_its_steps(server, protocol):
    models = ("pipeline", "add_sub", "mul")
    before = {m: stats(server, protocol, m) for m in models}
    requests = 5
    for seed in range(requests):
        a, b = vectors(seed)
        infer(server, protocol, "pipeline", INPUT0=a, INPUT1=b)
    change = {m: delta(stats(server, protocol, m), before[m]) for m in models}
    ensemble = change["pipeline"]
    assert ensemble["inference_count"] == requests
    assert ensemble["execution_count"] == requests
    assert ensemble["success_count"] == requests
    assert ensemble["fail_count"] == 0
    assert ensemble["queue_ns"] + ensemble["compute_infer_ns"] > 0
    assert ensemble["compute_infer_ns"] > 0
    for composing in ("add_sub", "mul"):
        assert change[composing]["inference_count"] == requests, composing
        assert change[composing]["success_count"] == requests, composing
    # as Triton reports them: the ensemble's queue and compute times are its steps' sums
    for duration in ("queue_ns", "compute_input_ns", "compute_infer_ns", "compute_output_ns"):
        assert ensemble[duration] == (change["add_sub"][duration]
                                      + change["mul"][duration]), duration


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failing_step_fails_the_request_with_its_reason(server, protocol):
    before = stats(server, protocol, "fails_midway")
    x = np.arange(3, dtype=np.float32)
    fails(lambda: infer(server, protocol, "fails_midway", X=x), INVALID[protocol],
          "ensemble 'fails_midway'", "step 1", "model 'raises'",
          "deliberate failure in execute")
    after = delta(stats(server, protocol, "fails_midway"), before)
    assert (after["fail_count"], after["success_count"]) == (1, 0)
    # the server keeps serving, the ensemble included
    a, b = vectors(11)
    result = infer(server, protocol, "pipeline", INPUT0=a, INPUT1=b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), (a + b) * (a - b))
    fails(lambda: infer(server, protocol, "fails_midway", X=x), INVALID[protocol],
          "model 'raises'")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_input_to_an_ensemble_names_the_ensemble_and_tensor(server, protocol):
    a, b = vectors(3)
    fails(lambda: infer(server, protocol, "pipeline", INPUT0=a[:3], INPUT1=b),
          INVALID[protocol], "'pipeline'", "'INPUT0'", "[3]", "[4]")
    fails(lambda: infer(server, protocol, "pipeline", INPUT0=a, INPUT1=b.astype(np.int32)),
          INVALID[protocol], "'pipeline'", "'INPUT1'", "INT32", "FP32")
    fails(lambda: infer(server, protocol, "pipeline", INPUT0=a),
          INVALID[protocol], "'pipeline'", "'INPUT1'")
    result = infer(server, protocol, "pipeline", INPUT0=a, INPUT1=b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), (a + b) * (a - b))


LOAD_FAILURES = {
    "bad_missing_model": ("step 0 (model 'no_such_model')", "cannot be served"),
    "bad_cycle": ("steps 0, 1", "cycle"),
    "bad_input_name": ("step 0 (model 'add_sub')", "'NOPE'", "does not have"),
    "bad_datatype": ("step 0 (model 'identity')", "'X'", "INT32", "FP32"),
    "bad_broken_step": ("step 0 (model 'broken_init')", "deliberate failure in initialize"),
    "bad_shape": ("ensemble tensor 'INPUT0'", "inconsistent shape", "[3]",
                  "step 0 (model 'add_sub'), input 'INPUT0'", "[4]"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensembles_that_cannot_run_fail_to_load_with_the_reason(server, protocol):
    with client_for(server, protocol) as client:
        if protocol == "http":
            index = client.get_model_repository_index()
        else:
            index = client.get_model_repository_index(as_json=True)["models"]
        entries = {entry["name"]: entry for entry in index}
        for name, fragments in LOAD_FAILURES.items():
            entry = entries[name]
            assert entry["state"] == "UNAVAILABLE", entry
            for fragment in (f"ensemble '{name}'", *fragments):
                assert fragment in entry["reason"], (fragment, entry)
            assert not client.is_model_ready(name)
        # every other model serves, the composing models of the failed ensembles included
        for name in ("pipeline", "fork_join", "batched", "fails_midway", "add_sub",
                     "identity"):
            assert entries[name]["state"] == "READY", entries[name]
            assert client.is_model_ready(name), name
    statuses = ("404", "StatusCode.NOT_FOUND")
    fails(lambda: infer(server, protocol, "bad_cycle", X=np.zeros(4, np.float32)), statuses,
          "bad_cycle", "cycle")


# --- explicit model control ----------------------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("explicit_ensembles")
    copy_examples(repo, "add_sub", "mul", "pipeline")
    with naiad_server("--model-repository", str(repo), "--model-control-mode", "explicit",
                      "--exit-on-error=false", "--strict-readiness=false") as process:
        yield process


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_loading_an_ensemble_loads_its_steps_models(explicit_server, protocol):
    a, b = vectors(5)
    expected = (a + b) * (a - b)
    with client_for(explicit_server, protocol) as client:
        for name in ("pipeline", "add_sub", "mul"):  # start from nothing loaded
            client.unload_model(name)
        for name in ("pipeline", "add_sub", "mul"):
            assert not client.is_model_ready(name), name

        client.load_model("pipeline")
        for name in ("pipeline", "add_sub", "mul"):
            assert client.is_model_ready(name), name
        result = infer(explicit_server, protocol, "pipeline", INPUT0=a, INPUT1=b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), expected)

        # As in Triton, unloading a composing model unloads the ensemble that calls it...
        client.unload_model("mul")
        assert not client.is_model_ready("mul")
        assert not client.is_model_ready("pipeline")
        assert client.is_model_ready("add_sub")
        assert index_states(client)["pipeline"] == ("UNAVAILABLE", "unloaded")
        fails(lambda: infer(explicit_server, protocol, "pipeline", INPUT0=a, INPUT1=b),
              ("400", "404", "StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE"), "pipeline")

        # ...and loading it again loads the ensemble again.
        client.load_model("mul")
        assert client.is_model_ready("mul")
        assert client.is_model_ready("pipeline")
        result = infer(explicit_server, protocol, "pipeline", INPUT0=a, INPUT1=b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), expected)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_ensemble_unloaded_on_purpose_stays_unloaded(explicit_server, protocol):
    with client_for(explicit_server, protocol) as client:
        client.load_model("pipeline")
        client.unload_model("pipeline")
        client.unload_model("mul")
        client.load_model("mul")
        assert client.is_model_ready("mul")
        assert not client.is_model_ready("pipeline")


def index_states(client) -> dict[str, tuple[str, str]]:
    """model name -> (state, reason) from the repository index, either client."""
    index = client.get_model_repository_index()
    if isinstance(index, list):  # http: a list of dicts
        return {m["name"]: (m.get("state", ""), m.get("reason", "")) for m in index}
    return {m.name: (m.state, m.reason) for m in index.models}
