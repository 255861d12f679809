"""nv_inference_first_response_histogram_ms: with ``--metrics-config
histogram_latencies=true`` a decoupled model's versions record the milliseconds from a
request's arrival to its first response, with Triton's buckets and lines (Triton records it
for decoupled models only; the 2.51 binary of ../shared/triton has no such histogram at all,
see tests/compat/TRITON_OBSERVED.md). Off by default; a value that is not a boolean is
refused (tests/core/metrics/test_unit_latency_metrics.py covers the other keys)."""

from __future__ import annotations

import queue
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from streaming_models import write_streaming_repository

from naiad.cli import _check, _options, build_parser
from naiad.testing import ServerProcess, naiad_server

FAMILY = "nv_inference_first_response_histogram_ms"


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as answer:
        return answer.read().decode()


def stream(server: ServerProcess, values: list[int]) -> int:
    """One streamed request to ``repeat`` (one response per value); the responses counted."""
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
        tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
        client.async_stream_infer("repeat", [tensor], enable_empty_final_response=True)
        count = 0
        while True:
            result, error = answers.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                break
            count += 1
        client.stop_stream()
    return count


def add_sub(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensors = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in tensors:
            tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        client.infer("add_sub", tensors)


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = write_streaming_repository(tmp_path_factory.mktemp("timed"))
    with naiad_server("--model-repository", str(repo), "--metrics-config",
                      "histogram_latencies=true") as server:
        yield server


def test_a_decoupled_model_records_its_first_responses(timed: ServerProcess):
    assert stream(timed, [1, 2, 3]) == 3
    assert stream(timed, [7]) == 1
    assert stream(timed, []) == 0  # the final flag alone: no response, nothing recorded
    add_sub(timed)
    text = scrape(timed)
    assert (f"# HELP {FAMILY} Duration from request to first response in milliseconds\n"
            f"# TYPE {FAMILY} histogram\n") in text
    family = next(f for f in text_string_to_metric_families(text) if f.name == FAMILY)
    lines = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    labels = (("model", "repeat"), ("version", "1"))
    assert lines[(f"{FAMILY}_count", labels)] == 2
    assert lines[(f"{FAMILY}_bucket", (("le", "+Inf"), *labels))] == 2
    buckets = [lines[(f"{FAMILY}_bucket", (("le", bound), *labels))]
               for bound in ("100", "500", "2000", "5000", "+Inf")]
    assert buckets == sorted(buckets)  # cumulative, Triton's default bounds
    # whole milliseconds, as Triton counts them
    assert lines[(f"{FAMILY}_sum", labels)] == int(lines[(f"{FAMILY}_sum", labels)])
    # every decoupled model has one from its load on; ordinary models (add_sub, slow_watch)
    # none, as in Triton
    assert {s.labels["model"] for s in family.samples} == {"repeat", "text_stream",
                                                           "cancel_watch"}
    assert f'{FAMILY}_bucket{{model="repeat",version="1",le="100"}} ' in text


def test_nothing_is_recorded_by_default(tmp_path):
    repo = write_streaming_repository(tmp_path)
    with naiad_server("--model-repository", str(repo)) as server:
        assert stream(server, [1]) == 1
        assert FAMILY not in scrape(server)


def parse(*argv: str):
    return build_parser().parse_args(["serve", "--model-repository", "r", *argv])


@pytest.mark.parametrize(("argv", "histograms"), [
    ((), False),
    (("--metrics-config=histogram_latencies=true",), True),
    (("--metrics-config", "histogram_latencies=1", "--metrics-config=counter_latencies=true"),
     True),
    (("--metrics-config=histogram_latencies=true", "--metrics-config=histogram_latencies=false"),
     False),
])
def test_histogram_latencies_is_accepted(argv, histograms):
    args = parse(*argv)
    assert _check(args) == []
    assert _options(args)[0].load.metrics.histogram_latencies is histograms


@pytest.mark.parametrize(("setting", "expected"), [
    ("histogram_latencies=maybe", "histogram_latencies=maybe: expected true or false"),
    ("histogram_latencies", "'histogram_latencies': expected KEY=VALUE"),
])
def test_a_bad_histogram_latencies_is_refused_with_the_reason(setting, expected):
    problems = _check(parse("--metrics-config=histogram_latencies=true",
                            f"--metrics-config={setting}"))
    assert problems == [f"--metrics-config {expected}"]
