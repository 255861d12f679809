"""instance_group end to end: instances run in parallel, several groups per model, and
KIND_GPU on a machine without a GPU is a load error, never a silent CPU fallback."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import write_model

from naiad.gpus import gpu_count
from naiad.testing import naiad_server

# Sleeps half a second and answers with the name of the instance that served the request.
WHO_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        time.sleep(0.5)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("WHO", np.array([self.name.encode()], dtype=np.object_))])
            for _ in requests]
"""


def who_config(name: str, groups: str) -> str:
    return f"""
name: "{name}"
backend: "python"
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "WHO", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {groups} ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("instances")
    write_model(repo, "two_instances", who_config("two_instances", "{ count: 2 kind: KIND_CPU }"),
                WHO_PY)
    write_model(repo, "two_groups", who_config(
        "two_groups", '{ name: "small" count: 1 kind: KIND_CPU }, '
                      '{ name: "large" count: 2 kind: KIND_CPU }'), WHO_PY)
    write_model(repo, "on_gpu", who_config("on_gpu", "{ count: 1 kind: KIND_GPU }"), WHO_PY)
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


def _who(url: str, model: str, protocol: str) -> str:
    module = httpclient if protocol == "http" else grpcclient
    with module.InferenceServerClient(url) as client:
        tensor = module.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        return client.infer(model, [tensor]).as_numpy("WHO")[0].decode()


def _parallel(url: str, model: str, protocol: str, count: int) -> tuple[list[str], float]:
    start = time.monotonic()
    with ThreadPoolExecutor(count) as pool:
        names = list(pool.map(lambda _: _who(url, model, protocol), range(count)))
    return names, time.monotonic() - start


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_two_instances_serve_two_requests_at_once(server, protocol):
    url = server.http_url if protocol == "http" else server.grpc_url
    names, elapsed = _parallel(url, "two_instances", protocol, 2)
    # Each request sleeps 0.5 s in its instance: in sequence they would take 1 s.
    assert elapsed < 0.9, f"two 0.5 s requests on two instances took {elapsed:.2f} s"
    assert sorted(names) == ["two_instances_0_0", "two_instances_0_1"]


def test_every_group_contributes_its_instances(server):
    names, elapsed = _parallel(server.http_url, "two_groups", "http", 3)
    assert sorted(names) == ["large_1", "large_2", "small_0"]
    assert elapsed < 1.2, f"three 0.5 s requests on three instances took {elapsed:.2f} s"


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU: KIND_GPU loads here")
def test_kind_gpu_without_a_gpu_is_a_load_error(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["on_gpu"]["state"] == "UNAVAILABLE"
        assert "KIND_GPU" in index["on_gpu"]["reason"]
        assert "no GPU" in index["on_gpu"]["reason"]
        assert not client.is_model_ready("on_gpu")
        assert client.is_model_ready("two_instances")  # the others serve
