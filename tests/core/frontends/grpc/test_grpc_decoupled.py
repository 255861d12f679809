"""Decoupled models over gRPC, end to end against a naiad process, with the official
``tritonclient.grpc`` (start_stream / async_stream_infer) and ``tritonclient.grpc.aio``
(stream_infer): zero, one and many responses per request, responses sent from a model's
own thread after execute returned, errors in the middle of a stream,
``triton_enable_empty_final_response`` / ``triton_final_response`` as tritonserver 2.51
sends them (tests/compat/TRITON_OBSERVED.md, "Streaming"), and the unary refusal."""

from __future__ import annotations

import asyncio
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from streaming_models import write_streaming_repository
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = write_streaming_repository(tmp_path_factory.mktemp("grpc-decoupled"))
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


class Stream:
    """One open stream of the sync client and what its callback got."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.results: queue.Queue = queue.Queue()
        self.client.start_stream(
            callback=lambda result, error: self.results.put((result, error)))

    def get(self):
        return self.results.get(timeout=TIMEOUT_S)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server):
    opened = Stream(server.grpc_url)
    yield opened
    opened.close()


def repeat_inputs(*values: int, module=grpcclient):
    tensor = module.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
    return [tensor]


def text_inputs(text: str, count: int, module=grpcclient):
    tensors = [module.InferInput("text_input", [1], "BYTES"),
               module.InferInput("count", [1], "INT32")]
    tensors[0].set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    tensors[1].set_data_from_numpy(np.array([count], dtype=np.int32))
    return tensors


def final_flag(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def is_empty_final(result) -> bool:
    response = result.get_response()
    return final_flag(result) and not response.outputs and not response.raw_output_contents


# --- many, one and zero responses --------------------------------------------------------


def test_every_response_is_a_message_and_the_last_one_final(stream):
    stream.client.async_stream_infer("repeat", repeat_inputs(7, 8, 9), request_id="many",
                                     enable_empty_final_response=True)
    got = [stream.get() for _ in range(4)]
    assert all(error is None for _, error in got)
    results = [result for result, _ in got]
    assert [r.get_response().id for r in results] == ["many"] * 4
    assert [int(r.as_numpy("OUT")[0]) for r in results[:3]] == [7, 8, 9]
    assert [int(r.as_numpy("IDX")[0]) for r in results[:3]] == [0, 1, 2]
    assert [final_flag(r) for r in results] == [False, False, False, True]
    assert is_empty_final(results[3])
    assert results[3].get_response().model_name == "repeat"


def test_the_final_flag_alone_is_not_sent_unless_asked(stream):
    # Zero responses and no empty final: nothing at all for the first request, so the
    # first message is the second request's.
    stream.client.async_stream_infer("repeat", repeat_inputs(), request_id="silent")
    stream.client.async_stream_infer("repeat", repeat_inputs(5), request_id="after")
    result, error = stream.get()
    assert error is None and result.get_response().id == "after"
    assert final_flag(result) is False


def test_zero_responses_with_empty_final(stream):
    stream.client.async_stream_infer("repeat", repeat_inputs(), request_id="zero",
                                     enable_empty_final_response=True)
    result, error = stream.get()
    assert error is None and is_empty_final(result)
    assert result.get_response().id == "zero"


def test_a_final_response_with_outputs_gets_no_extra_empty_one(stream):
    stream.client.async_stream_infer("text_stream", text_inputs("one", 1), request_id="one",
                                     enable_empty_final_response=True)
    result, error = stream.get()
    assert error is None and final_flag(result) is True
    assert result.as_numpy("text_output")[0] == b"one 0"
    # Were an empty final sent too, it would come before anything of the next request.
    stream.client.async_stream_infer("repeat", repeat_inputs(3), request_id="next")
    result, error = stream.get()
    assert error is None and result.get_response().id == "next"


def test_the_empty_final_parameter_must_be_a_bool_and_the_model_never_sees_it(stream):
    stream.client.async_stream_infer("text_stream", text_inputs("p", 1), request_id="p",
                                     enable_empty_final_response=True,
                                     parameters={"mine": "kept"})
    result, error = stream.get()
    assert error is None
    assert result.as_numpy("parameters")[0] == b'{"mine":"kept"}'


def test_an_empty_final_parameter_that_is_no_bool_is_refused(server):
    # tritonclient refuses to send it: the raw stub does.
    message = service_pb2.ModelInferRequest(model_name="repeat", id="bad")
    tensor = message.inputs.add(name="IN", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(1)
    message.parameters["triton_enable_empty_final_response"].string_param = "yes"
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(iter([message]), timeout=TIMEOUT_S))
    assert len(answers) == 1
    assert answers[0].infer_response.id == "bad"
    assert "triton_enable_empty_final_response" in answers[0].error_message
    assert "expected bool_param" in answers[0].error_message
    assert "'repeat'" in answers[0].error_message


def test_requests_of_one_stream_interleave_and_each_keeps_its_order(stream):
    for name in ("a", "b", "c"):
        stream.client.async_stream_infer("repeat", repeat_inputs(*range(20)), request_id=name)
    got = [stream.get() for _ in range(60)]
    per_request: dict[str, list[int]] = {}
    for result, error in got:
        assert error is None
        per_request.setdefault(result.get_response().id, []).append(
            int(result.as_numpy("IDX")[0]))
    assert per_request == {name: list(range(20)) for name in ("a", "b", "c")}


# --- errors ------------------------------------------------------------------------------


def test_an_error_in_the_middle_of_a_stream_and_the_stream_goes_on(stream):
    stream.client.async_stream_infer("repeat", repeat_inputs(1, -2, 3), request_id="mixed",
                                     enable_empty_final_response=True)
    got = [stream.get() for _ in range(4)]
    assert got[0][1] is None and int(got[0][0].as_numpy("OUT")[0]) == 1
    assert got[1][0] is None
    assert isinstance(got[1][1], InferenceServerException)
    assert got[1][1].message() == "repeat: negative value -2 at index 1"
    assert got[2][1] is None and int(got[2][0].as_numpy("OUT")[0]) == 3
    assert is_empty_final(got[3][0])
    stream.client.async_stream_infer("repeat", repeat_inputs(4), request_id="later")
    result, error = stream.get()
    assert error is None and int(result.as_numpy("OUT")[0]) == 4


def test_refused_requests_do_not_end_the_stream(stream):
    stream.client.async_stream_infer("nope", repeat_inputs(1), request_id="unknown")
    stream.client.async_stream_infer("repeat", [grpcclient.InferInput("IN", [1], "FP32")
                                                .set_data_from_numpy(
                                                    np.zeros(1, np.float32))],
                                     request_id="wrong-type")
    # Refusals go out in request order.
    unknown, wrong_type = (stream.get()[1].message() for _ in range(2))
    assert "'nope'" in unknown
    assert "'IN'" in wrong_type and "'repeat'" in wrong_type
    stream.client.async_stream_infer("repeat", repeat_inputs(2), request_id="fine")
    result, error = stream.get()
    assert error is None and result.get_response().id == "fine"


# --- ordinary models in a stream, unary calls --------------------------------------------


def test_an_ordinary_model_in_a_stream_says_final(stream):
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    stream.client.async_stream_infer("add_sub", inputs, request_id="plain")
    result, error = stream.get()
    assert error is None and final_flag(result) is True
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4) * 2)


def test_unary_model_infer_refuses_a_decoupled_model(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("repeat", repeat_inputs(1))
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
        assert refused.value.message().startswith(
            "ModelInfer RPC doesn't support models with decoupled transaction policy")
        assert "'repeat'" in refused.value.message()
        # The server keeps serving.
        assert client.is_model_ready("repeat")


# --- the asyncio client ------------------------------------------------------------------


def test_aio_stream_infer_gets_every_response(server):
    async def run() -> list:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            async def requests():
                yield {"model_name": "text_stream", "inputs": text_inputs("aio", 3, aioclient),
                       "request_id": "aio", "enable_empty_final_response": True}

            got = []
            async for result, error in client.stream_infer(requests()):
                assert error is None
                got.append(result)
                if final_flag(result):
                    break
            return got

    got = asyncio.run(run())
    assert [r.as_numpy("text_output")[0] for r in got] == [b"aio 0", b"aio 1", b"aio 2"]
    assert [final_flag(r) for r in got] == [False, False, True]


# --- responses delivered from other threads ------------------------------------------------


@pytest.fixture(scope="module")
def in_process_server(tmp_path_factory):
    """Python models in the server's process: their responses reach the stream from the
    instance's thread (isolated workers deliver them on the event loop)."""
    repo = write_streaming_repository(tmp_path_factory.mktemp("grpc-decoupled-in-process"))
    with naiad_server("--model-repository", str(repo),
                      "--backend-config", "python,execution-mode=in_process") as process:
        yield process


def test_responses_sent_from_model_threads_keep_each_requests_order(in_process_server):
    opened = Stream(in_process_server.grpc_url)
    try:
        for name in ("a", "b"):
            opened.client.async_stream_infer("repeat", repeat_inputs(*range(30)),
                                             request_id=name, enable_empty_final_response=True)
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
                  grpcclient.InferInput("INPUT1", [4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        opened.client.async_stream_infer("add_sub", inputs, request_id="plain")
        got = [opened.get() for _ in range(2 * 31 + 1)]
        assert all(error is None for _, error in got)
        per_request: dict[str, list[int]] = {}
        finals = []
        for result, _ in got:
            request_id = result.get_response().id
            if request_id == "plain":
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4) * 2)
                assert final_flag(result) is True
            elif is_empty_final(result):
                finals.append(request_id)
            else:
                per_request.setdefault(request_id, []).append(int(result.as_numpy("IDX")[0]))
        assert per_request == {"a": list(range(30)), "b": list(range(30))}
        assert sorted(finals) == ["a", "b"]
    finally:
        opened.close()
