"""Custom metrics end to end: a real ``naiad serve``, Python models (in worker processes and
in-process) that define counters, gauges and histograms with ``pb_utils.MetricFamily``,
driven with tritonclient over HTTP and gRPC; ``GET /metrics`` read with prometheus' own
parser. Misuse raises what Triton 2.51 raises; unloading a model removes its families."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from metrics_models import MISUSE_RAISES, MISUSE_TYPE_ERRORS, write_metrics_repository
from prometheus_client.parser import text_string_to_metric_families

from naiad.testing import ServerProcess, naiad_server

# (execution mode, where the models make their families): a worker's questions during
# initialize are answered while the server waits for its "ready" (WorkerChannel.call).
SETUPS = [
    pytest.param(("isolated", "initialize"), id="isolated"),
    pytest.param(("isolated", "execute"), id="isolated-made-in-execute"),
    pytest.param(("in_process", "initialize"), id="in_process"),
]


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as answer:
        return answer.read().decode()


def families(server: ServerProcess) -> dict:
    """name -> prometheus_client Metric, of the families whose name starts with test_ or
    misuse_."""
    return {family.name: family for family in text_string_to_metric_families(scrape(server))
            if family.name.startswith(("test_", "misuse_"))}


def samples(family) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


@pytest.fixture(scope="module", params=SETUPS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    mode, metrics_at = request.param
    repo = write_metrics_repository(tmp_path_factory.mktemp(mode), mode, metrics_at)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=*") as running:
        yield running


def infer_http(server: ServerProcess, value: float) -> float:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("VALUE", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        return float(client.infer("metered", [tensor]).as_numpy("SEEN")[0])


def infer_grpc(server: ServerProcess, value: float) -> float:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput("VALUE", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        return float(client.infer("metered", [tensor]).as_numpy("SEEN")[0])


def misuse(server: ServerProcess, case: str) -> str:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("CASE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([case.encode()], dtype=object))
        return client.infer("misuse", [tensor]).as_numpy("RAISED")[0].decode()


def test_counter_gauge_and_histogram_lines(server: ServerProcess):
    """The first test of each server: the metrics start from nothing."""
    values = [0.5, 3.0, 7.0, 20.0, 5.0, 1.0]
    for index, value in enumerate(values):
        seen = (infer_http if index % 2 else infer_grpc)(server, value)
        assert seen == index + 1  # whichever instance ran it, the count is shared
    found = families(server)
    labels = (("model", "metered"), ("version", "1"))

    counter = found["test_requests"]  # the parser drops a counter's _total
    assert counter.type == "counter"
    assert counter.documentation == "Requests the model executed"  # the first one stays
    assert samples(counter) == {("test_requests_total", labels): len(values),
                                ("test_requests_total", ()): len(values) / 2}

    gauge = found["test_last_value"]
    assert gauge.type == "gauge" and gauge.documentation == "The last VALUE\\seen"
    assert samples(gauge) == {("test_last_value", (labels[0], ("note", 'say "hi"'),
                                                   labels[1])): 1.0}

    histogram = found["test_value_distribution"]
    assert histogram.type == "histogram" and histogram.documentation == "VALUEs"
    assert samples(histogram) == {
        ("test_value_distribution_count", labels): 6,
        ("test_value_distribution_sum", labels): sum(values),
        ("test_value_distribution_bucket", (("le", "1"), *labels)): 2,
        ("test_value_distribution_bucket", (("le", "5"), *labels)): 4,
        ("test_value_distribution_bucket", (("le", "10"), *labels)): 5,
        ("test_value_distribution_bucket", (("le", "+Inf"), *labels)): 6,
    }


def test_lines_are_written_as_triton_writes_them(server: ServerProcess):
    infer_http(server, 2.0)
    text = scrape(server)
    assert "# HELP test_requests_total Requests the model executed\n" \
           "# TYPE test_requests_total counter\n" in text
    assert "# HELP test_last_value The last VALUE\\\\seen\n" in text
    assert '\ntest_last_value{model="metered",note="say \\"hi\\"",version="1"} 2\n' in text
    assert '\ntest_value_distribution_bucket{model="metered",version="1",le="5"} ' in text
    count_line = text.index('\ntest_value_distribution_count{model="metered",version="1"} ')
    sum_line = text.index('\ntest_value_distribution_sum{model="metered",version="1"} ')
    first_bucket = text.index('\ntest_value_distribution_bucket{model="metered",version="1",'
                              'le="1"} ')
    assert count_line < sum_line < first_bucket  # prometheus-cpp's order


@pytest.mark.parametrize("case", sorted(MISUSE_RAISES))
def test_misuse_raises_what_triton_raises(server: ServerProcess, case: str):
    assert misuse(server, case) == MISUSE_RAISES[case]


@pytest.mark.parametrize("case", sorted(MISUSE_TYPE_ERRORS))
def test_arguments_of_the_wrong_type_raise_type_errors(server: ServerProcess, case: str):
    assert misuse(server, case).startswith(MISUSE_TYPE_ERRORS[case])


def test_a_dropped_family_leaves_the_metrics_port(server: ServerProcess):
    assert misuse(server, "dropped_family").startswith("TritonModelException")
    misuse(server, "gauge_ok")  # the next metric call deletes what was dropped
    assert "misuse_dropped" not in families(server)
    assert "misuse_gauge" in families(server)


def test_unloading_a_model_removes_its_families(server: ServerProcess):
    infer_grpc(server, 1.0)
    assert {"test_requests", "test_last_value", "test_value_distribution"} <= set(
        families(server))
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.unload_model("metered")
        found = families(server)
        assert not {"test_requests", "test_last_value", "test_value_distribution"} & set(found)
        assert "misuse_counter" in found  # another model's stay
        client.load_model("metered")
    seen = infer_http(server, 1.0)
    assert seen == 1.0  # a new version starts from zero
    assert samples(families(server)["test_requests"])[
        ("test_requests_total", (("model", "metered"), ("version", "1")))] == 1.0
