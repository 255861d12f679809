"""The gRPC frontend end to end with the official ``tritonclient.grpc.aio`` client."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from grpc_helpers import DATATYPES, identity_name, sample, write_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = write_repository(tmp_path_factory.mktemp("grpc-aio"))
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


@pytest.fixture
async def client(server):
    c = aioclient.InferenceServerClient(server.grpc_url)
    yield c
    await c.close()


def add_sub_inputs(a=A, b=B):
    inputs = [aioclient.InferInput("INPUT0", [len(a)], "FP32"),
              aioclient.InferInput("INPUT1", [len(b)], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


async def error_of(awaitable) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        await awaitable
    return info.value


async def test_health_and_metadata(client):
    assert await client.is_server_live()
    assert await client.is_server_ready()
    assert await client.is_model_ready("add_sub")
    assert not await client.is_model_ready("nope")
    assert (await client.get_server_metadata()).name == "naiad"
    meta = await client.get_model_metadata("add_sub", as_json=True)
    assert [t["name"] for t in meta["inputs"]] == ["INPUT0", "INPUT1"]
    config = await client.get_model_config("identity_batch")
    assert config.config.max_batch_size == 8
    index = await client.get_model_repository_index(as_json=True)
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index["models"]


async def test_infer(client):
    result = await client.infer("add_sub", add_sub_inputs(), request_id="aio-1")
    assert result.get_response().id == "aio-1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


async def test_concurrent_inferences(client):
    async def one(i: int) -> np.ndarray:
        result = await client.infer("add_sub", add_sub_inputs(a=A * i))
        return result.as_numpy("OUTPUT0")

    outputs = await asyncio.gather(*(one(i) for i in range(40)))
    for i, out in enumerate(outputs):
        np.testing.assert_array_equal(out, A * i + B)


@pytest.mark.parametrize("datatype", ["BYTES", "BF16", "FP16", "UINT64", "BOOL"])
async def test_datatypes(client, datatype):
    data = sample(datatype, (5,))
    inp = aioclient.InferInput("INPUT0", [5], datatype)
    inp.set_data_from_numpy(data)
    got = (await client.infer(identity_name(datatype), [inp])).as_numpy("OUTPUT0")
    if datatype == "BYTES":
        assert got.tolist() == data.tolist()
    else:
        assert got.dtype == np.dtype(DATATYPES[datatype])
        np.testing.assert_array_equal(got, data)


async def test_errors_keep_the_server_serving(client):
    err = await error_of(client.infer("nope", add_sub_inputs()))
    assert err.status() == "StatusCode.NOT_FOUND" and "'nope'" in err.message()
    err = await error_of(client.infer("add_sub", add_sub_inputs(a=A[:2])))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'INPUT0'" in err.message() and "'add_sub'" in err.message()
    inp = aioclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(A)
    err = await error_of(client.infer("raises", [inp]))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "deliberate failure" in err.message()
    err = await error_of(client.get_model_metadata("broken"))
    assert err.status() == "StatusCode.NOT_FOUND" and "'broken'" in err.message()
    result = await client.infer("add_sub", add_sub_inputs())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


async def test_statistics(client):
    before = (await client.get_inference_statistics("counted")).model_stats[0]
    for i in range(3):
        inp = aioclient.InferInput("INPUT0", [2], "INT32")
        inp.set_data_from_numpy(np.array([i, i], np.int32))
        await client.infer("counted", [inp])
    after = (await client.get_inference_statistics("counted", "1")).model_stats[0]
    assert after.inference_count == before.inference_count + 3
    assert after.inference_stats.success.count == before.inference_stats.success.count + 3


async def test_stream_infer(client):
    async def requests():
        for i in range(8):
            if i == 3:
                yield {"model_name": "add_sub", "inputs": add_sub_inputs(a=A[:1]),
                       "request_id": "bad"}
            else:
                yield {"model_name": "add_sub", "inputs": add_sub_inputs(a=A + i),
                       "request_id": f"s-{i}"}

    got = []
    async for result, error in client.stream_infer(requests()):
        got.append((result, error))
        if len(got) == 8:
            break
    for i, (result, error) in enumerate(got):
        if i == 3:
            assert result is None and "'INPUT0'" in error.message()
        else:
            assert error is None and result.get_response().id == f"s-{i}"
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + i + B)
