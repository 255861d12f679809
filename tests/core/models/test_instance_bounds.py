"""Sizes a configuration makes the server allocate are bounded (issue 17, item 5).

``instance_group { count: 100000 }`` in a load override must be refused with 400 /
INVALID_ARGUMENT naming the model, field, value and setting, before a thread starts, and
every later load must still work; so must too many priority levels and warmup or state
tensors too large to build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.errors import InferenceServerError, Status
from naiad.models.limits import ConfigLimits, check_config_sizes
from naiad.testing import naiad_server

LIMITS = ConfigLimits(max_instances=8, max_priority_levels=10, max_tensor_bytes=1000)


def _refusal(**fields: object) -> str:
    config = ModelConfig()
    json_format.ParseDict(fields, config)
    with pytest.raises(InferenceServerError) as caught:
        check_config_sizes("m", config, LIMITS)
    assert caught.value.status is Status.INVALID_ARG
    return caught.value.message


def test_instances_are_counted_over_every_group() -> None:
    message = _refusal(instance_group=[{"count": 5, "kind": "KIND_CPU"},
                                       {"count": 4, "kind": "KIND_CPU"}])
    assert message == ("model 'm': instance_group asks for 9 instances, more than the 8 one "
                       "model may have (--max-instances-per-model)")


def test_kind_gpu_counts_each_gpu_it_names() -> None:
    assert "asks for 12 instances" in _refusal(
        instance_group=[{"count": 4, "kind": "KIND_GPU", "gpus": [0, 1, 2]}])


def test_priority_levels_are_bounded() -> None:
    assert _refusal(dynamic_batching={"priority_levels": 11}) == (
        "model 'm': dynamic_batching priority_levels 11 is more than the 10 levels a model "
        "may have (--max-priority-levels)")


def test_a_warmup_sample_is_bounded_with_its_batch() -> None:
    message = _refusal(max_batch_size=8, model_warmup=[{
        "name": "big", "batch_size": 4, "inputs": {"X": {
            "data_type": "TYPE_FP32", "dims": [100], "zero_data": True}}}])
    assert "model_warmup[0] ('big') dims make 1600 bytes with batch_size 4" in message
    assert "(--max-config-tensor-bytes)" in message


def test_a_sequence_state_initial_value_is_bounded() -> None:
    message = _refusal(sequence_batching={"state": [{
        "input_name": "S", "output_name": "T", "data_type": "TYPE_INT64",
        "dims": [2**31, 2**31]}]})
    assert "sequence_batching state 'S' initial value dims make" in message


def test_sizes_within_the_bounds_pass() -> None:
    config = ModelConfig()
    json_format.ParseDict({"max_batch_size": 2, "instance_group": [{"count": 8}],
                           "dynamic_batching": {"priority_levels": 10},
                           "model_warmup": [{"name": "w", "batch_size": 2, "inputs": {"X": {
                               "data_type": "TYPE_FP32", "dims": [125],
                               "zero_data": True}}}]}, config)
    check_config_sizes("m", config, LIMITS)


# --- over the load API ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    repo = tmp_path_factory.mktemp("bounds")
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=add_sub") as process:
        yield process


def _override(url: str, **fields: object) -> str:
    """add_sub's configuration as the server serves it, with ``fields`` replaced."""
    with httpclient.InferenceServerClient(url) as client:
        config = client.get_model_config("add_sub")
    config.update(fields)
    return json.dumps(config)


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads in /proc")
def test_a_huge_instance_count_is_refused_and_later_loads_work(server) -> None:  # type: ignore[no-untyped-def]
    threads = _threads(server.process.pid)
    huge = _override(server.http_url, instance_group=[{"count": 100000, "kind": "KIND_CPU"}])
    with httpclient.InferenceServerClient(server.http_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("add_sub", config=huge)
        assert caught.value.status() == "400"
        assert ("model 'add_sub': instance_group asks for 100000 instances, more than the 64 "
                "one model may have (--max-instances-per-model)") in caught.value.message()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("add_sub", config=huge)
        assert caught.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("add_sub", config=_override(
                server.http_url,
                dynamic_batching={"priority_levels": 2**40, "default_priority_level": 1}))
        assert "(--max-priority-levels)" in caught.value.message()
    assert _threads(server.process.pid) < threads + 16
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.load_model("add_sub", config=_override(
            server.http_url, instance_group=[{"count": 2, "kind": "KIND_CPU"}]))
        assert client.get_model_config("add_sub")["instance_group"][0]["count"] == 2
        assert client.is_model_ready("add_sub")
