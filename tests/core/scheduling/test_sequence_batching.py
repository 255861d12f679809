"""The sequence batcher end to end: correlation IDs (integer and string), START/END/READY/
CORRID control tensors, the direct and oldest strategies, implicit state, idle sequences,
the backlog, and the errors a client gets for a request outside a sequence."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import write_model

from naiad.testing import naiad_server

# Keeps one running sum per correlation ID, reset by START: the Triton example's pattern.
ACCUMULATE_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        time.sleep(0.02)  # long enough for concurrent requests to queue behind this batch
        responses = []
        for request in requests:
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().item()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy().item()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().item()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            assert ready == 1
            if start:
                self.sums[corrid] = np.zeros_like(value)
            self.sums[corrid] = self.sums[corrid] + value
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", self.sums[corrid]),
                pb_utils.Tensor("BATCH", np.full(value.shape, len(requests), np.int32))]))
        return responses
"""

# Holds no state of its own: the server carries it between requests (implicit state).
STATEFUL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = state + value
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)]))
        return responses
"""

CONTROLS = """
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
    { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY, int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: %s } ] }
  ]
"""


def accumulate_config(name: str, strategy: str, *, corrid: str = "TYPE_UINT64",
                      max_batch_size: int = 4, idle_us: int = 5_000_000) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "BATCH", data_type: TYPE_INT32, dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  {CONTROLS % corrid}
}}
"""


STATEFUL_CONFIG = """
name: "stateful"
backend: "python"
max_batch_size: 2
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
sequence_batching {
  direct { }
  state [ {
    input_name: "STATE_IN"
    output_name: "STATE_OUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
    initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "start_at" name: "start" }
  } ]
}
"""

STATE_START = 100

# Triton's iterative sequence: one request, rescheduled by its model (INPUT times) until done.
ITERATIVE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.runs += 1
            wanted = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0])
            if self.runs < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            runs, self.runs = self.runs, 0
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", np.array([runs], np.int32))]))
        return responses
"""
ITERATIVE_CONFIG = """
name: "iterative"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
sequence_batching { iterative_sequence: true }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("sequences")
    write_model(repo, "direct", accumulate_config("direct", "direct { }"), ACCUMULATE_PY)
    write_model(repo, "oldest", accumulate_config(
        "oldest", "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
                  "max_queue_delay_microseconds: 100000 }"), ACCUMULATE_PY)
    write_model(repo, "string_ids", accumulate_config("string_ids", "direct { }",
                                                      corrid="TYPE_STRING"), ACCUMULATE_PY)
    write_model(repo, "one_slot", accumulate_config("one_slot", "direct { }",
                                                    max_batch_size=1), ACCUMULATE_PY)
    write_model(repo, "short_idle", accumulate_config("short_idle", "direct { }",
                                                      idle_us=200_000), ACCUMULATE_PY)
    folder = write_model(repo, "stateful", STATEFUL_CONFIG, STATEFUL_PY)
    (folder / "initial_state").mkdir()
    (folder / "initial_state" / "start_at").write_bytes(
        np.array([STATE_START], np.int32).tobytes())
    visible = STATEFUL_CONFIG.replace('name: "stateful"', 'name: "state_visible"').replace(
        'output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]',
        'output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }, '
        '{ name: "STATE_OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]')
    folder = write_model(repo, "state_visible", visible, STATEFUL_PY)
    (folder / "initial_state").mkdir()
    (folder / "initial_state" / "start_at").write_bytes(
        np.array([STATE_START], np.int32).tobytes())
    write_model(repo, "iterative", ITERATIVE_CONFIG, ITERATIVE_PY)
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


def _client(server, protocol: str):
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    return module, module.InferenceServerClient(url)


def _send(server, protocol: str, model: str, value: int, sequence_id, *, start=False,
          end=False, output: str = "OUTPUT") -> int:
    """Send one request of a sequence; return ``output`` (BATCH: the size of the batch the
    request ran in)."""
    module, client = _client(server, protocol)
    with client:
        tensor = module.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], np.int32))
        result = client.infer(model, [tensor], sequence_id=sequence_id, sequence_start=start,
                              sequence_end=end)
        return int(result.as_numpy(output)[0][0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["direct", "oldest"])
def test_interleaved_sequences_keep_separate_sums(server, protocol, model):
    base = 1000 if protocol == "http" else 2000
    first, second = base + 1, base + 2
    sums = []
    sums.append(_send(server, protocol, model, 1, first, start=True))
    sums.append(_send(server, protocol, model, 10, second, start=True))
    sums.append(_send(server, protocol, model, 2, first))
    sums.append(_send(server, protocol, model, 20, second))
    sums.append(_send(server, protocol, model, 3, first, end=True))
    sums.append(_send(server, protocol, model, 30, second, end=True))
    assert sums == [1, 10, 3, 30, 6, 60]


@pytest.mark.parametrize("model", ["direct", "oldest"])
def test_concurrent_sequences_are_batched_together(server, model):
    """Four sequences sending at once share executions, and each keeps its own sum."""

    def run(index: int) -> tuple[list[int], list[int]]:
        sequence_id = 3000 + index + (100 if model == "oldest" else 0)
        sums, batches = [], []
        for step in range(8):
            # Even steps add the value; odd steps add 0 and report their batch size.
            if step % 2 == 0:
                sums.append(_send(server, "grpc", model, index, sequence_id,
                                  start=step == 0))
            else:
                batches.append(_send(server, "grpc", model, 0, sequence_id, end=step == 7,
                                     output="BATCH"))
        return sums, batches

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(1, 5)))
    for index, (sums, _) in enumerate(results, start=1):
        assert sums == [index, 2 * index, 3 * index, 4 * index]
    assert max(b for _, batches in results for b in batches) > 1


def test_string_correlation_ids(server):
    assert _send(server, "http", "string_ids", 5, "session-a", start=True) == 5
    assert _send(server, "grpc", "string_ids", 7, "session-b", start=True) == 7
    assert _send(server, "http", "string_ids", 5, "session-a", end=True) == 10
    assert _send(server, "grpc", "string_ids", 7, "session-b", end=True) == 14


def test_implicit_state_is_carried_between_requests(server):
    assert _send(server, "http", "stateful", 1, 41, start=True) == STATE_START + 1
    assert _send(server, "grpc", "stateful", 2, 42, start=True) == STATE_START + 2
    assert _send(server, "http", "stateful", 5, 41) == STATE_START + 6
    assert _send(server, "grpc", "stateful", 5, 42, end=True) == STATE_START + 7
    # A START begins again from the initial state.
    assert _send(server, "http", "stateful", 1, 41, start=True, end=True) == STATE_START + 1


def test_state_never_reaches_the_client(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        result = client.infer("stateful", [tensor], sequence_id=43, sequence_start=True,
                              sequence_end=True)
        names = [o["name"] for o in result.get_response()["outputs"]]
    assert names == ["OUTPUT"]


def test_a_state_output_listed_in_the_config_may_be_requested(server):
    """As in Triton, for debugging: the client sees the state only when the config lists it."""
    assert _send(server, "grpc", "state_visible", 3, 44, start=True,
                 output="STATE_OUT") == STATE_START + 3
    assert _send(server, "grpc", "state_visible", 4, 44, end=True) == STATE_START + 7


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_without_a_correlation_id_is_refused(server, protocol):
    module, client = _client(server, protocol)
    with client:
        tensor = module.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("direct", [tensor])
    assert "correlation ID" in info.value.message() and "'direct'" in info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_iterative_sequence_needs_no_correlation_id(server, protocol):
    """sequence_batching { iterative_sequence: true }: a request without a correlation ID is
    a sequence of its own, which the model reschedules until done (as in Triton)."""
    module, client = _client(server, protocol)
    with client:
        tensor = module.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], np.int32))
        assert client.infer("iterative", [tensor]).as_numpy("OUTPUT")[0] == 3


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_must_start_with_start(server, protocol):
    with pytest.raises(InferenceServerException) as info:
        _send(server, protocol, "direct", 1, 999_999)
    assert "START" in info.value.message() and "999999" in info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_string_id_for_an_integer_model_is_refused(server):
    with pytest.raises(InferenceServerException) as info:
        _send(server, "http", "direct", 1, "text-id", start=True)
    assert "unsigned integer" in info.value.message()


def test_an_ended_sequence_needs_a_new_start(server):
    assert _send(server, "http", "direct", 4, 77, start=True, end=True) == 4
    with pytest.raises(InferenceServerException) as info:
        _send(server, "http", "direct", 4, 77)
    assert "START" in info.value.message()


def test_an_idle_sequence_is_released(server):
    assert _send(server, "http", "short_idle", 1, 88, start=True) == 1
    time.sleep(0.8)  # max_sequence_idle_microseconds is 0.2 s; the reaper runs after it
    with pytest.raises(InferenceServerException) as info:
        _send(server, "http", "short_idle", 1, 88)
    assert "START" in info.value.message()


def test_a_new_sequence_waits_for_a_free_slot(server):
    """one_slot has one instance with one slot: a second sequence is backlogged until the
    first ends, then runs."""
    assert _send(server, "http", "one_slot", 1, 501, start=True) == 1
    answers: list[int] = []
    waiting = threading.Thread(
        target=lambda: answers.append(_send(server, "grpc", "one_slot", 9, 502, start=True,
                                            end=True)))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not answers, "the backlogged sequence ran without a slot"
    assert _send(server, "http", "one_slot", 1, 501, end=True) == 2
    waiting.join(10)
    assert answers == [9]


def test_server_keeps_serving_after_sequence_errors(server):
    with pytest.raises(InferenceServerException):
        _send(server, "grpc", "oldest", 1, 123_456)
    assert _send(server, "grpc", "oldest", 1, 123_457, start=True, end=True) == 1
