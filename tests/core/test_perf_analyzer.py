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

import dataclasses
import json
import shutil
import subprocess
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from perf_analyzer_hang import WAITS_ON_ITSELF, ServerAccount, port_of
from perf_analyzer_tool import RUN_TIMEOUT, SECONDS, PerfAnalyzer, Run, find_or_set_up
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


# A model that holds each request until a file (its "release_file" parameter) exists, for
# the check that a request the server holds is never taken for perf_analyzer's own hang; it
# gives up after HOLD_LIMIT_S.
HOLD_LIMIT_S = 60 * SECONDS
HOLD_CONFIG = """
name: "hold"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "release_file" value {{ string_value: "{release}" }} }}
"""
HOLD_PY = f"""
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.release = parameters["release_file"]["string_value"]

    def execute(self, requests):
        deadline = time.monotonic() + {HOLD_LIMIT_S}
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                    "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
"""
HOLD_RELEASE = "release"  # in the model's folder

# perf_analyzer 2.51 can wait forever on itself when --request-count is given (two races of
# its own; tests/core/perf_analyzer_hang.py has the causes and the evidence). Those runs take
# a second or two; past this they are looked at, and a hang shown to be perf_analyzer's own
# runs once more.
REQUEST_COUNT_TIMEOUT = 20 * SECONDS


@dataclass(frozen=True)
class Mode:
    id: str
    protocol: str  # "http" or "grpc"
    model: str
    args: tuple[str, ...]
    shared_memory: bool = False
    timeout: float | None = None  # default: REQUEST_COUNT_TIMEOUT or RUN_TIMEOUT

    @property
    def time_limit(self) -> float:
        if self.timeout is not None:
            return self.timeout
        return REQUEST_COUNT_TIMEOUT if "--request-count" in self.args else RUN_TIMEOUT

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
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("perf-analyzer-models")
    for name in ("add_sub", "identity_batch", "strings", "repeat", "mul", "pipeline"):
        shutil.copytree(COMPAT_MODELS / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    write_model(repo, "accumulate", ACCUMULATE_CONFIG, ACCUMULATE_PY)
    write_model(repo, "hold", HOLD_CONFIG.format(release=repo / "hold" / HOLD_RELEASE), HOLD_PY)
    return repo


@pytest.fixture(scope="module")
def server(perf_analyzer: PerfAnalyzer, repository: Path):
    with naiad_server("--model-repository", str(repository)) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


def counts(client: httpclient.InferenceServerClient, model: str) -> tuple[int, int]:
    """The statistics extension's success count of ``model`` and its successes and
    failures together (the requests it answered)."""
    stats = client.get_inference_statistics(model)["model_stats"]
    success = sum(s["inference_stats"]["success"]["count"] for s in stats)
    return success, success + sum(s["inference_stats"]["fail"]["count"] for s in stats)


def successes(client: httpclient.InferenceServerClient, model: str) -> int:
    return counts(client, model)[0]


def server_account(server, client: httpclient.InferenceServerClient,
                   model: str) -> ServerAccount:
    """Requests of ``model`` the server answered (successes and failures) and requests
    pending in any model (``nv_inference_pending_request_count``)."""
    answered = counts(client, model)[1]
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10 * SECONDS) as response:
        metrics = response.read().decode()
    pending = sum(int(float(line.rsplit(" ", 1)[1])) for line in metrics.splitlines()
                  if line.startswith("nv_inference_pending_request_count{"))
    return ServerAccount(answered, pending)


def measure(perf_analyzer: PerfAnalyzer, server, client, mode: Mode, data: Path,
            answered_before: int = 0) -> Run:
    url = server.http_url if mode.protocol == "http" else server.grpc_url
    args = [arg.replace("{data}", str(data)) for arg in mode.args]
    return perf_analyzer.run("-m", mode.model, "-u", url, "-i", mode.protocol, *args,
                             timeout=mode.time_limit, server_port=port_of(url),
                             server_account=lambda: server_account(server, client, mode.model),
                             answered_before=answered_before)


class PerfAnalyzerHung(UserWarning):
    """perf_analyzer hung on itself (its lost wake-up) and the run was made again."""


@pytest.mark.parametrize("mode", [m.param() for m in MODES])
def test_perf_analyzer_runs_clean(perf_analyzer, server, client, data, mode):
    before, answered = counts(client, mode.model)
    run = measure(perf_analyzer, server, client, mode, data, answered)
    if run.hang is not None:
        # Excused once, and only on evidence that naiad holds nothing (perf_analyzer_hang).
        assert run.hang.perf_analyzer_waits_on_itself, run.explain()
        warnings.warn(PerfAnalyzerHung(run.explain()), stacklevel=1)
        if mode.shared_memory:  # what the killed run registered, it could not unregister
            client.unregister_system_shared_memory()
        before, answered = counts(client, mode.model)
        run = measure(perf_analyzer, server, client, mode, data, answered)
    assert run.returncode == 0, run.explain()
    assert run.problems == [], run.explain()
    measured = run.client_requests
    assert measured > 0, run.explain()
    # The statistics extension counted them (and the warm-up ones perf_analyzer sends).
    assert successes(client, mode.model) - before >= measured, run.explain()
    if mode.shared_memory:  # perf_analyzer unregistered what it registered, and nothing failed
        assert client.get_system_shared_memory_status() == []
        assert client.get_cuda_shared_memory_status() == []


def test_a_wrong_answer_is_reported(perf_analyzer, server, client, data, tmp_path):
    """The check above can fail: perf_analyzer compares outputs with validation_data and
    reports a mismatch in a line the test treats as a problem."""
    wrong = json.loads(json.dumps(ADD_SUB_DATA))
    wrong["validation_data"][0]["OUTPUT0"][3] = 6.0
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    mode = Mode("wrong", "http", "add_sub", (*FIXED, "--input-data", str(tmp_path / "wrong.json")))
    run = measure(perf_analyzer, server, client, mode, data)
    assert any("Output doesn't match expected output" in line for line in run.problems), \
        run.explain()


def test_a_request_naiad_holds_is_not_excused(perf_analyzer, repository, server, client,
                                              data):
    """The hang check can fail: a run whose request the server holds (the model waits for a
    file) is not taken for perf_analyzer's own hang; released, the request is answered."""
    release = repository / "hold" / HOLD_RELEASE
    before, answered = counts(client, "hold")
    mode = Mode("hold", "http", "hold", ("--request-count", "1", "--shape", "INPUT0:1"),
                timeout=3 * SECONDS)
    try:
        run = measure(perf_analyzer, server, client, mode, data, answered)
        assert run.hang is not None, run.explain()
        assert not run.hang.perf_analyzer_waits_on_itself, run.explain()
        assert any(t.wait not in WAITS_ON_ITSELF for t in run.hang.first[0].threads), \
            run.explain()
    finally:
        release.touch()
    deadline = time.monotonic() + HOLD_LIMIT_S
    while successes(client, "hold") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    release.unlink()
    assert successes(client, "hold") == before + 1, "the held request was never answered"


# perf_analyzer's two races (perf_analyzer_hang.py), made certain under gdb.
# Discarded records: hold the main thread a second where it empties the workers' records at the
# start of the measurement, while the workers send and record every request.
DISCARDED_RECORDS_GDB = """
set pagination off
set confirm off
break triton::perfanalyzer::LoadManager::SwapRequestRecords
run
call (int) usleep(1000000)
delete
continue
"""
# Lost wake-up: stop the first worker that reaches its call to condition_variable::wait
# (HandleExecuteOff+240 in the 2.51 binary: its predicate has just read execute_ false); run
# the main thread alone through ResumeWorkers (execute_ = true, notify_all: nobody waits yet),
# unless it is past it already; then let every thread go.
LOST_WAKE_UP_GDB = """
set pagination off
set confirm off
break main
run
delete
tbreak *('triton::perfanalyzer::RequestRateWorker::HandleExecuteOff'+240)
continue
python
import gdb
def functions(thread):
    thread.switch()
    frame, names = gdb.newest_frame(), []
    while frame is not None:
        names.append(frame.name() or "")
        frame = frame.older()
    return " ".join(names)
main = next(t for t in gdb.selected_inferior().threads() if t.num == 1)
stack = functions(main)
gdb.execute("set scheduler-locking on")
if "ResumeWorkers" in stack or "notify_all" in stack:
    gdb.execute("finish")
elif "InitCustomIntervals" in stack:
    gdb.execute("tbreak triton::perfanalyzer::RequestRateManager::ResumeWorkers thread 1")
    gdb.execute("continue")
    gdb.execute("finish")
gdb.execute("set scheduler-locking off")
end
continue
"""


@pytest.mark.long
@pytest.mark.parametrize("script, answered", [
    pytest.param(DISCARDED_RECORDS_GDB, 20, id="discarded-records"),
    pytest.param(LOST_WAKE_UP_GDB, 15, id="lost-wake-up"),  # a worker's 5 are never sent
])
def test_perf_analyzers_own_hang_is_told_apart(perf_analyzer, server, client, data, tmp_path,
                                               script, answered):
    """perf_analyzer's own hangs, made to happen, are recognised as such: the server answered
    every request it got and holds none."""
    gdb = shutil.which("gdb")
    if gdb is None:
        pytest.skip("gdb is not installed (Debian: apt-get install gdb)")
    if subprocess.run([gdb, "-batch", "-ex", "python print(1)"], capture_output=True,
                      text=True, timeout=60 * SECONDS).stdout.strip() != "1":
        pytest.skip(f"{gdb} has no Python scripting")
    (tmp_path / "race.gdb").write_text(script)
    under_gdb = dataclasses.replace(
        perf_analyzer, wrapper=(gdb, "-batch", "-x", str(tmp_path / "race.gdb"), "--args"))
    mode = next(m for m in MODES if m.id == "http-request-intervals")
    run = measure(under_gdb, server, client, dataclasses.replace(mode, timeout=30 * SECONDS),
                  data, counts(client, mode.model)[1])
    assert run.hang is not None, run.explain()
    assert run.hang.perf_analyzer_waits_on_itself, run.explain()
    assert run.hang.answered == answered, run.explain()
