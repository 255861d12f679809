"""Triton's qa/L0_input_validation, ported (facts, not code) and run over both protocols with
the official clients: required and optional inputs, unknown and repeated inputs, shapes of
batching and non-batching models, the byte size a shape implies against the bytes sent
(numbers and BYTES elements), and a lying request batched with an honest one: the honest
one's answer is its own data."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S
from tritonclient.utils import InferenceServerException

PROTOCOLS = {"http": httpclient, "grpc": grpcclient}
ROW = 8  # batch_delay's dims


@pytest.fixture(params=sorted(PROTOCOLS))
def api(request, hardening_server):
    """(client module, a client) for each protocol."""
    module = PROTOCOLS[request.param]
    url = hardening_server.http_url if module is httpclient else hardening_server.grpc_url
    client = module.InferenceServerClient(url)
    yield module, client
    client.close()


def fp32(module, name: str, data: np.ndarray, shape: tuple | None = None):
    tensor = module.InferInput(name, list(data.shape), "FP32")
    tensor.set_data_from_numpy(data.astype(np.float32))
    if shape is not None:
        tensor.set_shape(list(shape))  # a shape that lies about the data (as Triton's test)
    return tensor


def strings(module, name: str, count: int, shape: tuple):
    tensor = module.InferInput(name, [count], "BYTES")
    tensor.set_data_from_numpy(np.array([str(i).encode() for i in range(count)], np.object_))
    tensor.set_shape(list(shape))
    return tensor


def refused(client, model: str, inputs: list, *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, inputs)
    message = info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), \
        (info.value.status(), message)
    for fragment in (model, *fragments):
        assert fragment in message, message
    return message


def one(value: float) -> np.ndarray:
    return np.array([value], np.float32)


def test_required_inputs_all_missing(api):
    client = api[1]
    message = refused(client, "input_optional", [], "INPUT0", "INPUT1", "INPUT2")
    assert "INPUT3" not in message  # optional: not asked for


def test_some_required_inputs_missing(api):
    module, client = api
    message = refused(client, "input_optional", [fp32(module, "INPUT0", one(1))],
                      "INPUT1", "INPUT2")
    assert "INPUT3" not in message


def test_optional_input_given_or_not(api):
    module, client = api
    inputs = [fp32(module, f"INPUT{i}", one(i + 1)) for i in range(3)]
    assert client.infer("input_optional", inputs).as_numpy("OUTPUT0")[0] == 6
    inputs.append(fp32(module, "INPUT3", one(10)))
    assert client.infer("input_optional", inputs).as_numpy("OUTPUT0")[0] == 16


def test_all_inputs_optional_and_none_given(api):
    client = api[1]
    assert client.infer("input_all_optional", []).as_numpy("OUTPUT0")[0] == 0


def test_unknown_input(api):
    module, client = api
    inputs = [fp32(module, f"INPUT{i}", one(i)) for i in range(3)]
    refused(client, "input_optional", [*inputs, fp32(module, "INPUT9", one(9))], "INPUT9")


def test_non_batching_model_wrong_shape(api):
    module, client = api
    refused(client, "input_optional",
            [fp32(module, "INPUT0", np.ones(2)), *(fp32(module, f"INPUT{i}", one(i))
                                                  for i in (1, 2))], "INPUT0", "[1]")


def test_batching_model_without_batch_dimension(api):
    module, client = api
    refused(client, "batch_delay", [fp32(module, "INPUT0", np.ones(ROW))], "INPUT0")


def test_batching_model_batch_too_large(api):
    module, client = api
    refused(client, "batch_delay", [fp32(module, "INPUT0", np.ones((9, ROW)))], "9")


def test_batching_model_wrong_row_shape(api):
    module, client = api
    refused(client, "batch_delay", [fp32(module, "INPUT0", np.ones((1, ROW + 1)))], "INPUT0")


def test_more_bytes_than_the_shape_holds(api):
    # Triton: "input byte size mismatch for input 'INPUT0' for model ... Expected 32, got 40"
    module, client = api
    lying = fp32(module, "INPUT0", np.arange(ROW + 2)[None], shape=(1, ROW))
    refused(client, "batch_delay", [lying], "INPUT0", "32", "40")


def test_fewer_bytes_than_the_shape_holds(api):
    module, client = api
    lying = fp32(module, "INPUT0", np.arange(ROW - 2)[None], shape=(1, ROW))
    refused(client, "batch_delay", [lying], "INPUT0", "32", "24")


@pytest.mark.parametrize("count", [14, 18])
def test_bytes_element_count_against_the_shape(api, count):
    # Triton: "expected 16 string elements for inference input 'INPUT1' ..., got 14", and
    # "unexpected number of string elements 17 ... expecting 16" for more.
    module, client = api
    refused(client, "identity_bytes", [strings(module, "INPUT0", count, (16,))], "INPUT0",
            "16")


def test_a_lying_request_batched_with_an_honest_one(hardening_server):
    """Triton's test_shape_overlapped: Alice sends 10 values under shape [1, 8], Bob 8 honest
    ones, at the same time to a model that batches them; Bob gets exactly his data back."""
    url = hardening_server.grpc_url
    honest = 100 + np.arange(ROW, dtype=np.float32)[None]

    def alice():
        with grpcclient.InferenceServerClient(url) as client:
            lying = fp32(grpcclient, "INPUT0", np.arange(ROW + 2)[None], shape=(1, ROW))
            try:
                client.infer("batch_delay", [lying], client_timeout=ANSWER_TIMEOUT_S)
            except InferenceServerException as exc:
                return exc.status()
            return "accepted"

    def bob():
        with grpcclient.InferenceServerClient(url) as client:
            return client.infer("batch_delay", [fp32(grpcclient, "INPUT0", honest)],
                                client_timeout=ANSWER_TIMEOUT_S).as_numpy("OUTPUT0")

    with ThreadPoolExecutor(2) as pool:
        alice_status, bob_result = pool.submit(alice), pool.submit(bob)
        assert alice_status.result() == "StatusCode.INVALID_ARGUMENT"
        np.testing.assert_array_equal(bob_result.result(), honest)
