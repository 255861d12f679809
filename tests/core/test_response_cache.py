"""The response cache end to end: real server processes, the official clients.

One server (``--cache-config local,size=1 MiB``) serves the examples' add_sub (with
``response_cache { enable: true }``), mul and pipeline (an ensemble whose first step is
add_sub), an uncached copy of add_sub, a cached BYTES identity, a cached model whose
execute raises, and a decoupled model asking for the cache (refused at load). A second
server's budget holds one add_sub response but not two; a third has no cache at all.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY, RAISES_PY, identity_config, write_model

from naiad.response_cache import encode_response
from naiad.testing import ServerProcess, naiad_server
from naiad.types import InferenceResponse, Tensor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
CACHED = "\nresponse_cache { enable: true }\n"
DECOUPLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return None
"""


def cached_repository(root: Path) -> Path:
    for name in ("add_sub", "mul", "pipeline"):
        shutil.copytree(EXAMPLES / name, root / name)
    config = root / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + CACHED)
    shutil.copytree(EXAMPLES / "add_sub", root / "plain")
    plain = root / "plain" / "config.pbtxt"
    plain.write_text(plain.read_text().replace('name: "add_sub"', 'name: "plain"'))
    write_model(root, "strings", identity_config("strings", "TYPE_STRING") + CACHED,
                IDENTITY_PY)
    write_model(root, "raises", identity_config("raises", "TYPE_FP32") + CACHED, RAISES_PY)
    write_model(root, "dec_cached", identity_config("dec_cached", "TYPE_FP32") + CACHED
                + "model_transaction_policy { decoupled: true }\n", DECOUPLED_PY)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cached_repository(tmp_path_factory.mktemp("cached"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--cache-config", "local,size=1048576",
                      "--exit-on-error=false", "--strict-readiness=false") as process:
        yield process


def add_sub_inputs(module: object, a: list[float]) -> list:
    inputs = [module.InferInput("INPUT0", [4], "FP32"),  # type: ignore[attr-defined]
              module.InferInput("INPUT1", [4], "FP32")]  # type: ignore[attr-defined]
    inputs[0].set_data_from_numpy(np.array(a, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    return inputs


def stats(server: ServerProcess, model: str) -> dict:
    client = httpclient.InferenceServerClient(server.http_url)
    found = client.get_inference_statistics(model)["model_stats"][0]
    return {"executions": found["execution_count"],
            "inferences": found["inference_count"],
            "hits": found["inference_stats"]["cache_hit"]["count"],
            "misses": found["inference_stats"]["cache_miss"]["count"],
            "successes": found["inference_stats"]["success"]["count"]}


def delta(before: dict, after: dict) -> dict:
    return {key: after[key] - before[key] for key in before}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_repeated_request_is_answered_from_the_cache(server: ServerProcess,
                                                       protocol: str) -> None:
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    # a value of its own per protocol: the other test's entries must not answer this one
    a = [1, 2, 3, 4] if protocol == "http" else [5, 6, 7, 8]
    before = stats(server, "add_sub")
    first = client.infer("add_sub", add_sub_inputs(module, a))
    second = client.infer("add_sub", add_sub_inputs(module, a))
    changed = delta(before, stats(server, "add_sub"))
    for name, expected in (("OUTPUT0", np.array(a) + 1), ("OUTPUT1", np.array(a) - 1)):
        np.testing.assert_array_equal(first.as_numpy(name), expected)
        np.testing.assert_array_equal(second.as_numpy(name), expected)
    assert changed == {"executions": 1, "inferences": 1, "hits": 1, "misses": 1,
                       "successes": 2}


def test_other_inputs_miss(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = stats(server, "add_sub")
    for a in ([10, 0, 0, 0], [11, 0, 0, 0]):
        result = client.infer("add_sub", add_sub_inputs(httpclient, a))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.array(a) + 1)
    assert delta(before, stats(server, "add_sub"))["misses"] == 2


def test_a_hit_still_answers_only_the_outputs_asked_for(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    a = [20, 21, 22, 23]
    wanted = [httpclient.InferRequestedOutput("OUTPUT1")]
    client.infer("add_sub", add_sub_inputs(httpclient, a), outputs=wanted)
    before = stats(server, "add_sub")
    result = client.infer("add_sub", add_sub_inputs(httpclient, a), outputs=wanted)
    assert delta(before, stats(server, "add_sub"))["hits"] == 1
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.array(a) - 1)


def test_a_model_without_response_cache_is_never_cached(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = stats(server, "plain")
    for _ in range(2):
        client.infer("plain", add_sub_inputs(httpclient, [1, 2, 3, 4]))
    assert delta(before, stats(server, "plain")) == {
        "executions": 2, "inferences": 2, "hits": 0, "misses": 0, "successes": 2}


def test_bytes_responses_come_back_whole(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.array([b"caf\xc3\xa9", b"", b"\x00bin"], dtype=object)
    before = stats(server, "strings")
    for _ in range(2):
        tensor = grpcclient.InferInput("INPUT0", [3], "BYTES")
        tensor.set_data_from_numpy(data)
        result = client.infer("strings", [tensor])
        assert list(result.as_numpy("OUTPUT0")) == list(data)
    assert delta(before, stats(server, "strings"))["hits"] == 1


def test_failures_are_not_cached(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(2):
        tensor = httpclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(np.ones(2, dtype=np.float32))
        with pytest.raises(InferenceServerException, match="deliberate failure"):
            client.infer("raises", [tensor])
    found = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "raises")["model_stats"][0]["inference_stats"]
    assert found["fail"]["count"] == 2 and found["cache_hit"]["count"] == 0


def test_an_ensemble_step_is_answered_from_its_models_cache(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    a = [30, 31, 32, 33]
    before_step, before_mul = stats(server, "add_sub"), stats(server, "mul")
    for _ in range(2):
        result = client.infer("pipeline", add_sub_inputs(httpclient, a))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"),
                                      (np.array(a) + 1) * (np.array(a) - 1))
    assert delta(before_step, stats(server, "add_sub"))["executions"] == 1
    assert delta(before_step, stats(server, "add_sub"))["hits"] == 1
    assert delta(before_mul, stats(server, "mul"))["executions"] == 2


def test_a_decoupled_model_asking_for_the_cache_does_not_load(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["dec_cached"]["state"] == "UNAVAILABLE"
    assert "response cache does not support decoupled" in index["dec_cached"]["reason"]
    assert client.is_model_ready("add_sub")  # nothing else is affected


def test_bad_requests_are_refused_before_the_cache(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(np.ones(3, dtype=np.float32))
    with pytest.raises(InferenceServerException, match=r"INPUT[01]"):
        client.infer("add_sub", [tensor])


def entry_bytes() -> int:
    """What one add_sub response costs in the local cache: its key and stored form."""
    outputs = [Tensor(n, "FP32", (4,), np.zeros(4, np.float32)) for n in ("OUTPUT0", "OUTPUT1")]
    stored = encode_response(InferenceResponse(outputs=outputs))
    assert stored is not None
    return 32 + len(stored)


def test_a_budget_smaller_than_two_responses_evicts(repo: Path) -> None:
    budget = entry_bytes() * 3 // 2
    # tritonserver's older flag, the same as --cache-config local,size=BYTES
    with naiad_server("--model-repository", str(repo), "--response-cache-byte-size",
                      str(budget), "--exit-on-error=false",
                      "--strict-readiness=false") as small:
        client = httpclient.InferenceServerClient(small.http_url)
        for a in ([1, 0, 0, 0], [2, 0, 0, 0], [1, 0, 0, 0]):  # the second evicts the first
            client.infer("add_sub", add_sub_inputs(httpclient, a))
        assert stats(small, "add_sub")["hits"] == 0
        client.infer("add_sub", add_sub_inputs(httpclient, [1, 0, 0, 0]))
        assert stats(small, "add_sub")["hits"] == 1


def test_without_a_cache_the_model_runs_and_the_log_says_why(repo: Path) -> None:
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as uncached:
        client = httpclient.InferenceServerClient(uncached.http_url)
        for _ in range(2):
            client.infer("add_sub", add_sub_inputs(httpclient, [1, 2, 3, 4]))
        assert stats(uncached, "add_sub")["executions"] == 2
        assert re.search(r"model 'add_sub' version 1 enables response_cache but the server "
                         r"has no response cache", uncached.log())


@pytest.mark.parametrize(("flags", "message"), [
    (["--cache-config", "local"], "expected NAME,KEY=VALUE"),
    (["--cache-config", "local,size=abc"], "size must be a whole number of bytes"),
    (["--cache-config", "local,size=10", "--cache-config", "local,colour=red"],
     "unknown setting(s) colour"),
    (["--cache-config", "nosuch,a=b"], "no response cache 'nosuch' is installed"),
    (["--cache-config", "local,size=10", "--cache-config", "redis,host=h"],
     "one response cache at a time"),
    (["--response-cache-byte-size", "-1"], "must not be negative"),
])
def test_a_bad_cache_configuration_stops_start_up(repo: Path, flags: list[str],
                                                  message: str) -> None:
    process = ServerProcess([*naiad_command(), "--model-repository", str(repo), *flags],
                            ready_timeout=60)
    with pytest.raises(RuntimeError, match=r"exited with [12]") as failure:
        process.start()
    assert message in str(failure.value)


def naiad_command() -> list[str]:
    return [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            "--http-port", "{http_port}",
            "--grpc-port", "{grpc_port}", "--metrics-port", "{metrics_port}"]
