"""The real perf_analyzer (tritonclient 2.51's binary) against a naiad server, every mode.

One short run per mode (HTTP, gRPC, async, streaming, decoupled, system shared memory, each
kind of input data, sequences, request rates, concurrency ranges, request intervals, BYTES
inputs, batch sizes, an ensemble): it must exit 0 without a line that reports an error, a
failure or a warning, and the server's statistics extension must have counted at least the
requests perf_analyzer measured. Runs that need one measurement send a fixed number of
requests (``--request-count``); runs over several load levels, and sequences, use short time
windows with the stability check relaxed, so that a busy machine cannot fail them.

Skips, with the reason, when perf_analyzer cannot be set up (see perf_analyzer_tool).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from perf_analyzer_tool import PerfAnalyzer, Run, find_or_set_up
from zoo import write_model

from naiad.testing import naiad_server

COMPAT_MODELS = Path(__file__).resolve().parents[1] / "compat" / "model_repository"

# One measurement of a fixed number of requests: no stability check to fail.
FIXED = ("--request-count", "20")
# Several load levels (and sequences): short time windows; a stability limit no run can
# miss (percent).
WINDOWS = ("--measurement-mode", "time_windows", "--measurement-interval", "200",
           "--stability-percentage", "100000")

# A running sum per sequence, reset by START; a slot without a request (READY 0, which
# tritonserver's direct strategy sends) changes nothing. The same file runs under Triton.
ACCUMULATE_CONFIG = """
name: "accumulate"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ACCUMULATE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            total = value("INPUT")
            if value("READY").item():
                corrid = value("CORRID").item()
                if value("START").item():
                    self.sums[corrid] = np.zeros_like(total)
                total = self.sums[corrid] = self.sums[corrid] + total
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", total.astype(np.int32))]))
        return responses
"""

# add_sub on real data, with the outputs perf_analyzer must get back (it checks them).
ADD_SUB_DATA = {
    "data": [{"INPUT0": [1.0, 2.0, 3.0, 4.0], "INPUT1": [4.0, 3.0, 2.0, 1.0]},
             {"INPUT0": [0.5, 0.5, 0.5, 0.5], "INPUT1": [1.0, 1.0, 1.0, 1.0]}],
    "validation_data": [{"OUTPUT0": [5.0, 5.0, 5.0, 5.0], "OUTPUT1": [-3.0, -1.0, 1.0, 3.0]},
                        {"OUTPUT0": [1.5, 1.5, 1.5, 1.5], "OUTPUT1": [-0.5, -0.5, -0.5, -0.5]}],
}
STRINGS_DATA = {"data": [{"INPUT0": {"content": ["a", "bc", "déf"], "shape": [3]}},
                         {"INPUT0": {"content": ["x"], "shape": [1]}}]}


@dataclass(frozen=True)
class Mode:
    id: str
    protocol: str  # "http" or "grpc"
    model: str
    args: tuple[str, ...]
    shared_memory: bool = False

    def param(self) -> object:
        return pytest.param(self, id=self.id)


SHM = ("--shared-memory", "system", "--output-shared-memory-size", "64")

# {data} is replaced by the folder of the data files.
MODES = [
    Mode("http", "http", "add_sub", FIXED),
    Mode("grpc", "grpc", "add_sub", FIXED),
    Mode("http-async", "http", "add_sub", (*FIXED, "--async")),
    Mode("grpc-async", "grpc", "add_sub", (*FIXED, "--async")),
    Mode("grpc-streaming", "grpc", "add_sub", (*FIXED, "--streaming")),
    Mode("grpc-streaming-decoupled", "grpc", "repeat",
         (*FIXED, "--streaming", "--shape", "IN:3", "--input-data", "zero")),
    Mode("http-shared-memory", "http", "add_sub", (*FIXED, *SHM), shared_memory=True),
    Mode("grpc-shared-memory", "grpc", "add_sub", (*FIXED, *SHM), shared_memory=True),
    Mode("grpc-streaming-shared-memory", "grpc", "add_sub", (*FIXED, "--streaming", *SHM),
         shared_memory=True),
    Mode("http-input-random", "http", "add_sub", (*FIXED, "--input-data", "random")),
    Mode("http-input-zero", "http", "add_sub", (*FIXED, "--input-data", "zero")),
    Mode("http-input-json", "http", "add_sub",
         (*FIXED, "--input-data", "{data}/add_sub.json")),
    Mode("grpc-input-json", "grpc", "add_sub",
         (*FIXED, "--input-data", "{data}/add_sub.json")),
    Mode("http-input-folder", "http", "add_sub",
         (*FIXED, "--input-data", "{data}/add_sub")),
    # Sequences in time windows: with --request-count, perf_analyzer 2.51 now and then ends
    # a sequence without its start when it stops (tritonserver 2.51 sees the same).
    Mode("http-sequence", "http", "accumulate", (*WINDOWS, "--sequence-length", "4")),
    Mode("grpc-sequence", "grpc", "accumulate", (*WINDOWS, "--sequence-length", "4")),
    Mode("grpc-sequence-streaming", "grpc", "accumulate",
         (*WINDOWS, "--sequence-length", "4", "--streaming")),
    Mode("grpc-sequence-concurrency", "grpc", "accumulate",
         (*WINDOWS, "--sequence-length", "3", "--concurrency-range", "2")),
    Mode("grpc-sequence-request-rate", "grpc", "accumulate",
         (*WINDOWS, "--request-rate-range", "40", "--sequence-length", "3",
          "--num-of-sequences", "2")),
    Mode("http-concurrency-range", "http", "add_sub",
         (*WINDOWS, "--concurrency-range", "1:3")),
    Mode("grpc-request-rate-range", "grpc", "add_sub",
         (*WINDOWS, "--request-rate-range", "20:40:20")),
    Mode("http-request-intervals", "http", "add_sub",
         (*FIXED, "--request-intervals", "{data}/intervals.txt")),
    Mode("http-strings", "http", "strings", (*FIXED, "--shape", "INPUT0:3")),
    Mode("grpc-strings", "grpc", "strings",
         (*FIXED, "--shape", "INPUT0:3", "--string-data", "hello")),
    Mode("http-strings-json", "http", "strings",
         (*FIXED, "--input-data", "{data}/strings.json")),
    Mode("http-strings-shared-memory", "http", "strings",
         (*FIXED, "--shape", "INPUT0:3", "--string-length", "8", *SHM), shared_memory=True),
    Mode("http-batch", "http", "identity_batch", (*FIXED, "-b", "4", "--shape", "INPUT0:5")),
    Mode("grpc-batch", "grpc", "identity_batch", (*FIXED, "-b", "2", "--shape", "INPUT0:5")),
    Mode("http-batch-shared-memory", "http", "identity_batch",
         (*FIXED, "-b", "2", "--shape", "INPUT0:5", *SHM), shared_memory=True),
    Mode("http-ensemble", "http", "pipeline", FIXED),
]


@pytest.fixture(scope="module")
def perf_analyzer() -> PerfAnalyzer:
    return find_or_set_up()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The input data files of the modes that read some."""
    folder = tmp_path_factory.mktemp("perf-analyzer-data")
    (folder / "add_sub.json").write_text(json.dumps(ADD_SUB_DATA))
    (folder / "strings.json").write_text(json.dumps(STRINGS_DATA), encoding="utf-8")
    (folder / "add_sub").mkdir()
    np.arange(4, dtype=np.float32).tofile(folder / "add_sub" / "INPUT0")
    np.ones(4, dtype=np.float32).tofile(folder / "add_sub" / "INPUT1")
    (folder / "intervals.txt").write_text("1000\n2000\n500\n")  # microseconds
    return folder


@pytest.fixture(scope="module")
def server(perf_analyzer: PerfAnalyzer, tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("perf-analyzer-models")
    for name in ("add_sub", "identity_batch", "strings", "repeat", "mul", "pipeline"):
        shutil.copytree(COMPAT_MODELS / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    write_model(repo, "accumulate", ACCUMULATE_CONFIG, ACCUMULATE_PY)
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


def successes(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"]
    return sum(s["inference_stats"]["success"]["count"] for s in stats)


def measure(perf_analyzer: PerfAnalyzer, server, mode: Mode, data: Path) -> Run:
    url = server.http_url if mode.protocol == "http" else server.grpc_url
    args = [arg.replace("{data}", str(data)) for arg in mode.args]
    return perf_analyzer.run("-m", mode.model, "-u", url, "-i", mode.protocol, *args)


@pytest.mark.parametrize("mode", [m.param() for m in MODES])
def test_perf_analyzer_runs_clean(perf_analyzer, server, client, data, mode):
    before = successes(client, mode.model)
    run = measure(perf_analyzer, server, mode, data)
    assert run.returncode == 0, run.explain()
    assert run.problems == [], run.explain()
    measured = run.client_requests
    assert measured > 0, run.explain()
    # The statistics extension counted them (and the warm-up ones perf_analyzer sends).
    assert successes(client, mode.model) - before >= measured, run.explain()
    if mode.shared_memory:  # perf_analyzer unregistered what it registered, and nothing failed
        assert client.get_system_shared_memory_status() == []
        assert client.get_cuda_shared_memory_status() == []


def test_a_wrong_answer_is_reported(perf_analyzer, server, data, tmp_path):
    """The check above can fail: perf_analyzer compares outputs with validation_data and
    reports a mismatch in a line the test treats as a problem."""
    wrong = json.loads(json.dumps(ADD_SUB_DATA))
    wrong["validation_data"][0]["OUTPUT0"][3] = 6.0
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    mode = Mode("wrong", "http", "add_sub", (*FIXED, "--input-data", str(tmp_path / "wrong.json")))
    run = measure(perf_analyzer, server, mode, data)
    assert any("Output doesn't match expected output" in line for line in run.problems), \
        run.explain()
