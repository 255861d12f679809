"""model_warmup end to end: every instance runs its samples before the model is ready, with
zero, random or file data; a failing or malformed sample fails the load with the reason."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import write_model

from naiad.testing import naiad_server

# Remembers what it executed; its answer reports it, so the test sees what warmup did.
RECORDER_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.batches = []
        self.first = None

    def execute(self, requests):
        data = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        if self.first is None:
            self.first = data[0]
        self.batches.append(len(requests))
        time.sleep(0.2)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("WHO", np.array([[self.name.encode()]], dtype=np.object_)),
            pb_utils.Tensor("BATCHES", np.array([self.batches], dtype=np.int32)),
            pb_utils.Tensor("FIRST", self.first)]) for _ in requests]
"""

REFUSES_ZEROS_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if not pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().any():
                raise ValueError("all-zero input")
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def recorder_config(name: str, warmup: str, instances: int = 1) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 3 ] }} ]
output [
  {{ name: "WHO", data_type: TYPE_STRING, dims: [ 1 ] }},
  {{ name: "BATCHES", data_type: TYPE_INT32, dims: [ -1 ] }},
  {{ name: "FIRST", data_type: TYPE_FP32, dims: [ 3 ] }}
]
instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]
{warmup}
"""


def refuses_config(name: str, warmup: str) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 3 ] }} ]
{warmup}
"""


ZERO_WARMUP = """
model_warmup [ {
  name: "zeros" batch_size: 2 count: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
} ]
"""

FILE_WARMUP = """
model_warmup [ {
  name: "from_file" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "in0" } }
} ]
"""

RANDOM_WARMUP = """
model_warmup [ {
  name: "random" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] random_data: true } }
} ]
"""

FILE_VALUES = np.array([1.5, -2.0, 7.25], dtype=np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("warmup")
    write_model(repo, "zeros_two_instances",
                recorder_config("zeros_two_instances", ZERO_WARMUP, 2), RECORDER_PY)
    folder = write_model(repo, "from_file", recorder_config("from_file", FILE_WARMUP),
                         RECORDER_PY)
    (folder / "warmup").mkdir()
    (folder / "warmup" / "in0").write_bytes(FILE_VALUES.tobytes())
    write_model(repo, "random_ok", refuses_config("random_ok", RANDOM_WARMUP),
                REFUSES_ZEROS_PY)
    write_model(repo, "warmup_fails", refuses_config("warmup_fails", ZERO_WARMUP),
                REFUSES_ZEROS_PY)
    write_model(repo, "file_missing", refuses_config("file_missing", FILE_WARMUP),
                REFUSES_ZEROS_PY)
    write_model(repo, "too_big", refuses_config("too_big", ZERO_WARMUP.replace(
        "batch_size: 2", "batch_size: 9")), REFUSES_ZEROS_PY)
    write_model(repo, "unknown_input", refuses_config("unknown_input", ZERO_WARMUP.replace(
        'key: "INPUT0"', 'key: "NOPE"')), REFUSES_ZEROS_PY)
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


def _call(url: str, model: str, protocol: str) -> dict[str, np.ndarray]:
    module = httpclient if protocol == "http" else grpcclient
    with module.InferenceServerClient(url) as client:
        tensor = module.InferInput("INPUT0", [1, 3], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 3), np.float32))
        result = client.infer(model, [tensor])
        return {name: result.as_numpy(name) for name in ("WHO", "BATCHES", "FIRST")}


def _index(server) -> dict[str, dict]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return {m["name"]: m for m in client.get_model_repository_index()}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_instance_warms_up_before_ready(server, protocol):
    url = server.http_url if protocol == "http" else server.grpc_url
    # Two requests at once reach both instances (each sleeps 0.2 s per execution); a few
    # rounds make sure of it even on a loaded machine.
    seen: dict[str, dict[str, np.ndarray]] = {}
    for _ in range(5):
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: _call(url, "zeros_two_instances", protocol),
                                    range(2)))
        seen.update((a["WHO"][0][0].decode(), a) for a in answers)
        if len(seen) == 2:
            break
    assert sorted(seen) == ["zeros_two_instances_0_0", "zeros_two_instances_0_1"]
    for answer in seen.values():
        batches = answer["BATCHES"][0].tolist()
        # count: 3 executions of a batch of two 1-row requests, then this request.
        assert batches[:3] == [2, 2, 2]
        assert answer["FIRST"][0].tolist() == [0.0, 0.0, 0.0]


def test_input_data_file_is_read_from_the_warmup_folder(server):
    answer = _call(server.http_url, "from_file", "http")
    assert answer["BATCHES"][0].tolist()[0] == 1
    np.testing.assert_array_equal(answer["FIRST"][0], FILE_VALUES)


def test_random_data_is_not_zeros(server):
    index = _index(server)
    assert index["random_ok"]["state"] == "READY"


@pytest.mark.parametrize(("model", "fragments"), [
    ("warmup_fails", ["warmup sample 'zeros' failed", "all-zero input"]),
    ("file_missing", ["from_file", "in0", "cannot read"]),
    ("too_big", ["batch_size 9", "max_batch_size 4"]),
    ("unknown_input", ["zeros", "NOPE"]),
])
def test_a_bad_warmup_fails_the_load_with_its_reason(server, model, fragments):
    entry = _index(server)[model]
    assert entry["state"] == "UNAVAILABLE"
    for fragment in fragments:
        assert fragment in entry["reason"], (fragment, entry["reason"])
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert not client.is_model_ready(model)
        assert client.is_model_ready("from_file")  # the others serve


def test_warmup_is_not_counted_in_statistics(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        before = client.get_inference_statistics("random_ok")["model_stats"][0]
    assert before["inference_count"] == 0 and before["execution_count"] == 0
