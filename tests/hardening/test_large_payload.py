"""Triton's qa/L0_large_payload at sizes a small machine runs: the limits are set small
(--http-max-input-size, --max-response-size) and requests just under and just over them go
over HTTP and gRPC. Under: served, the identity's answer equal to its input. Over: refused
with the right status and a message naming the setting; the server serves on after."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, call, hardening_repository
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

MAX_INPUT = 64 * 1024  # bytes: --http-max-input-size
MAX_RESPONSE = 96 * 1024  # bytes: --max-response-size (an UNDER answer in binary fits)
SLACK = 1024  # bytes the request's JSON header and framing take, at most
UNDER = (MAX_INPUT - SLACK) // 4  # FP32 values that fit, with their header
OVER = MAX_INPUT // 4 + 1  # FP32 values whose bytes alone are over the limit


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = hardening_repository(tmp_path_factory.mktemp("large-payload"))
    with naiad_server("--model-repository", str(repo),
                      f"--http-max-input-size={MAX_INPUT}",
                      f"--max-response-size={MAX_RESPONSE}") as process:
        yield process


def values(count: int) -> np.ndarray:
    return np.random.default_rng(count).random(count, dtype=np.float32)


def infer(module, url: str, data: np.ndarray, binary_output: bool = True) -> np.ndarray:
    # the HTTP client's infer(timeout=) is Triton's request parameter, not a client wait
    wait = {"network_timeout": ANSWER_TIMEOUT_S} if module is httpclient else {}
    with module.InferenceServerClient(url, **wait) as client:
        tensor = module.InferInput("INPUT0", [len(data)], "FP32")
        tensor.set_data_from_numpy(data)
        if module is httpclient:
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_output)]
            return client.infer("identity_fp32", [tensor],
                                outputs=outputs).as_numpy("OUTPUT0")
        return client.infer("identity_fp32", [tensor],
                            client_timeout=ANSWER_TIMEOUT_S).as_numpy("OUTPUT0")


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_under_the_input_limit_is_served(server, module):
    url = server.http_url if module is httpclient else server.grpc_url
    data = values(UNDER)
    np.testing.assert_array_equal(infer(module, url, data), data)


def test_over_the_input_limit_over_http_is_413(server):
    with pytest.raises(InferenceServerException) as info:
        infer(httpclient, server.http_url, values(OVER))
    assert info.value.status() == "413", info.value.message()
    assert "--http-max-input-size" in info.value.message()


def test_a_content_length_over_the_limit_is_refused_before_the_body(server):
    # The body is never sent: the answer comes from the announced length alone.
    answer = call(server.http_port, "POST", "/v2/models/identity_fp32/infer",
                  b"", {"Content-Length": str(MAX_INPUT + 1)})
    assert answer.status == 413, answer.error
    assert "--http-max-input-size" in answer.error


def test_over_the_input_limit_over_grpc_is_resource_exhausted(server):
    with pytest.raises(InferenceServerException) as info:
        infer(grpcclient, server.grpc_url, values(OVER))
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED", info.value.message()
    assert str(MAX_INPUT) in info.value.message()


def test_a_json_answer_over_the_response_limit_is_refused(server):
    """An input under the request limit whose JSON answer (at least 7 characters per value:
    random float32 in [0, 1) written shortest, and a comma) is over --max-response-size:
    the amplification of issue 17, item 8."""
    data = values(UNDER)
    assert 7 * len(data) > MAX_RESPONSE > 4 * len(data)
    with pytest.raises(InferenceServerException) as info:
        infer(httpclient, server.http_url, data, binary_output=False)
    assert info.value.status() == "413", info.value.message()
    assert "--max-response-size" in info.value.message()
    assert "identity_fp32" in info.value.message()
    # the same answer in binary is under the limit
    np.testing.assert_array_equal(infer(httpclient, server.http_url, data), data)


def test_served_after_the_refusals(server):
    data = values(4)
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        np.testing.assert_array_equal(infer(module, url, data), data)
    assert server.process.poll() is None


@pytest.mark.long
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_large_payload_at_the_default_limit(tmp_path, module):
    """The default limit (64 MiB): 60 MiB is served, 65 MiB refused."""
    repo = hardening_repository(tmp_path)
    with naiad_server("--model-repository", str(repo)) as process:
        url = process.http_url if module is httpclient else process.grpc_url
        data = values(60 * 1024 * 1024 // 4)
        np.testing.assert_array_equal(infer(module, url, data), data)
        with pytest.raises(InferenceServerException):
            infer(module, url, values(65 * 1024 * 1024 // 4))
        np.testing.assert_array_equal(infer(module, url, values(4)), values(4))
