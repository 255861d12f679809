"""The response size limit over HTTP (issue 17, item 8): a body larger than
``--max-response-size`` is refused (RESOURCE_EXHAUSTED, HTTP 413) naming the model, the
output, the size and the setting; before it is built when bounds tell, chunk by chunk when
they cannot, and byte for byte as without a limit when it fits."""

from __future__ import annotations

import numpy as np
import pytest

from naiad.errors import InferenceServerError, Status, http_status
from naiad.frontends.http import codec
from naiad.frontends.http.codec import encode_response
from naiad.frontends.http.generate_codec import encode_generate
from naiad.shm import SharedMemoryRegistry
from naiad.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

MIB = 1024 * 1024


def request(binary: bool = False, outputs: list[RequestedOutput] | None = None
            ) -> InferenceRequest:
    parameters = {"binary_data_output": True} if binary else {}
    return InferenceRequest("identity", 1, {}, requested_outputs=outputs,
                            parameters=parameters)


def encode(tensors: list[Tensor], limit: int | None, binary: bool = False,
           outputs: list[RequestedOutput] | None = None) -> tuple[bytes, int | None]:
    return encode_response(request(binary, outputs), InferenceResponse(tensors), 1,
                           SharedMemoryRegistry(), limit)


def refused(tensors: list[Tensor], limit: int, binary: bool = False) -> str:
    with pytest.raises(InferenceServerError) as info:
        encode(tensors, limit, binary)
    assert info.value.status is Status.RESOURCE_EXHAUSTED
    assert http_status(info.value) == 413
    message = info.value.message
    assert "--max-response-size" in message and f"({limit} bytes)" in message, message
    assert "'identity'" in message, message
    return message


def fp32(name: str, data: np.ndarray) -> Tensor:
    return Tensor(name, "FP32", data.shape, data.astype(np.float32))


def test_json_that_cannot_fit_is_refused_before_it_is_written(monkeypatch):
    def never(tensor):  # pragma: no cover - failing here is the test failing
        raise AssertionError("the JSON data was written")

    monkeypatch.setattr(codec, "to_list", never)
    # 300,000 elements take at least 4 bytes each as JSON ("0.0,"): over 1 MiB.
    message = refused([fp32("OUT", np.zeros(300_000))], MIB)
    assert "output 'OUT'" in message and "at least 1200002 bytes" in message, message


def test_json_that_may_not_fit_is_written_in_chunks_and_refused_when_it_does_not():
    # Random floats take ~19 bytes each: bounds say 0.4 to 2.5 MB, the text says no.
    values = np.random.default_rng(7).random(100_000)
    message = refused([fp32("SMALL", np.zeros(3)), fp32("OUT", values)], MIB)
    assert "output 'OUT'" in message, message


@pytest.mark.parametrize("count", [0, 1, 65_536, 65_537, 200_000])
def test_json_written_in_chunks_is_byte_for_byte_the_unlimited_answer(count):
    rng = np.random.default_rng(count)
    tensors = [fp32("A", rng.random(count) * 1e6), fp32("B", np.zeros(count)),
               Tensor("C", "BYTES", (3,), np.array([b"x", b"\x00\xff", "é".encode()],
                                                   dtype=object))]
    unlimited = encode(tensors, None)
    # A limit above the answer, below the bounds' worst case: the chunked path runs.
    assert encode(tensors, len(unlimited[0]) + 1) == unlimited
    assert encode(tensors, len(unlimited[0])) == unlimited
    if count:
        with pytest.raises(InferenceServerError):
            encode(tensors, len(unlimited[0]) - 1)


def test_binary_outputs_count_exactly():
    data = np.zeros(MIB // 4, np.float32)  # 1 MiB of binary data, then the JSON header
    message = refused([fp32("OUT", data)], MIB, binary=True)
    assert "output 'OUT'" in message and "in shared memory" in message, message
    body, header_length = encode([fp32("OUT", data)], MIB + 200, binary=True)
    assert header_length is not None and len(body) - header_length == MIB


def test_the_largest_output_is_named():
    message = refused([fp32("SMALL", np.zeros(10)), fp32("BIG", np.zeros(2_000))], 1_000)
    assert "output 'BIG'" in message, message


def test_an_answer_that_fits_is_unchanged():
    tensors = [fp32("OUT", np.arange(10))]
    assert encode(tensors, MIB) == encode(tensors, None)


def test_generate_answers_have_the_same_limit():
    big = [fp32("OUT", np.zeros(1_000))]  # at least 4,002 bytes as JSON
    with pytest.raises(InferenceServerError) as info:
        encode_generate(request(), InferenceResponse(big), 1_000)
    assert info.value.status is Status.RESOURCE_EXHAUSTED
    assert "--max-response-size (1000 bytes)" in info.value.message
    text = [Tensor("TEXT", "BYTES", (1,), np.array([b"x" * 900], dtype=object))]
    with pytest.raises(InferenceServerError):  # known once written: 900 bytes and the rest
        encode_generate(request(), InferenceResponse(text), 920)
    assert encode_generate(request(), InferenceResponse(text), 2_000) == \
        encode_generate(request(), InferenceResponse(text))
