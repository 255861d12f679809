"""The gRPC frontend's limits (issue 17, items 3, 4, 7 and 8), end to end against a real
``naiad serve``: what grpc core enforces for naiad (message and metadata sizes, handshake and
idle timeouts) and what naiad answers itself (undecodable messages, shapes numpy cannot make,
responses over --max-response-size). Raw HTTP/2 through the ``h2`` package (a dependency of
hypercorn, so of naiad) where the official client cannot send what is tested; every wait
bounded. A unary call whose request message stalls (--grpc-message-timeout) is item 4's
short body, on gRPC."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.testing import ServerProcess, naiad_server

SECONDS = 1.0
KIB = 1024
MAX_INPUT = 256 * KIB
MAX_RESPONSE = 16 * KIB
MAX_HEADER = 2 * KIB
SERVICE = "/inference.GRPCInferenceService"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("grpc-limits-repo")
    write_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), f"--http-max-input-size={MAX_INPUT}",
                      f"--max-response-size={MAX_RESPONSE}",
                      f"--grpc-max-header-size={MAX_HEADER}") as process:
        yield process


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield channel


def infer_request(shape: list[int], data: bytes = b"", datatype: str = "FP32"
                  ) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity_fp32", id="r1")
    request.inputs.add(name="INPUT0", datatype=datatype, shape=shape)
    request.raw_input_contents.append(data)
    return request


def refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def assert_serves(server: ServerProcess) -> None:
    """The server is alive and the next good inference is exact."""
    data = np.arange(16, dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput("INPUT0", [16], "FP32")]
        inputs[0].set_data_from_numpy(data)
        result = client.infer("identity_fp32", inputs, client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


# --- messages that are not what they claim (item 7) --------------------------------------------


@pytest.mark.parametrize("method", ["ModelInfer", "ServerLive", "RepositoryModelLoad"])
@pytest.mark.parametrize("payload", [b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f",
                                     bytes(range(256))])
def test_bytes_that_do_not_parse_are_invalid_argument_naming_the_rpc(channel, method,
                                                                     payload):
    call = channel.unary_unary(f"{SERVICE}/{method}")  # no serializer: the bytes as they are
    error = refusal(lambda: call(payload, timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.details().startswith(f"{method}: the request is not a valid inference."), \
        error.details()


def test_an_undecodable_message_in_a_stream_is_refused_and_the_stream_goes_on(server,
                                                                              channel):
    call = channel.stream_stream(f"{SERVICE}/ModelStreamInfer")
    good = infer_request([4], np.ones(4, np.float32).tobytes()).SerializeToString()
    answers = [pb.ModelStreamInferResponse.FromString(raw)
               for raw in call(iter([b"\xff\xff\xff", good]), timeout=30)]
    assert [bool(a.error_message) for a in answers] == [True, False]
    assert "ModelStreamInfer: the request is not a valid inference.ModelInferRequest" in \
        answers[0].error_message
    assert answers[1].infer_response.id == "r1"


# --- shapes (item 7) ------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "fragment"), [
    ([0, 2**62, 2**62], "--http-max-input-size"),
    ([0, MAX_INPUT], f"the {MAX_INPUT} bytes a request may carry (--http-max-input-size)"),
    ([-1, 4], "non-negative integers"),
    ([1] * 65, "65 dimensions"),
])
def test_shapes_numpy_cannot_make_are_invalid_argument(server, channel, shape, fragment):
    infer = channel.unary_unary(f"{SERVICE}/ModelInfer",
                                request_serializer=pb.ModelInferRequest.SerializeToString)
    error = refusal(lambda: infer(infer_request(shape), timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    for expected in ("input 'INPUT0' of model 'identity_fp32'", fragment):
        assert expected in error.details(), error.details()
    assert_serves(server)


def test_an_empty_shape_numpy_cannot_make_is_400_over_http(server):
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                   "shape": [0, 2**62, 2**62], "data": []}]})
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request("POST", "/v2/models/identity_fp32/infer", body,
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        status, text = response.status, response.read().decode()
    finally:
        connection.close()
    assert status == 400, text
    assert "input 'INPUT0' of model 'identity_fp32'" in text and "[0,4611686018427387904" in text


# --- sizes on the wire (items 3 and 7) -----------------------------------------------------------


class RawConnection:
    """A bare HTTP/2 client connection (h2) to the server's gRPC port."""

    def __init__(self, port: int, preface: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10 * SECONDS)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        if preface:
            self.h2.initiate_connection()
            self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def start_call(self, method: str) -> int:
        stream = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"), (":path", f"{SERVICE}/{method}"),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers")])
        return stream

    def events(self, until: float) -> Iterator[h2.events.Event]:
        """What the server sends, until it closes the connection or ``until`` (monotonic)."""
        while (left := until - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                return
            if not data:
                yield h2.events.ConnectionTerminated()
                return
            yield from self.h2.receive_data(data)
            self.flush()

    def close(self) -> None:
        self.sock.close()


def grpc_status(events: Iterator[h2.events.Event]) -> dict[bytes, bytes] | None:
    """The headers carrying ``grpc-status``, once they come."""
    for event in events:
        headers = getattr(event, "headers", None)
        if headers and any(name == b"grpc-status" for name, _ in headers):
            return dict(headers)
    return None


@pytest.mark.parametrize("announced", [2**31, 2**32 - 1, MAX_INPUT + 1])
def test_a_message_announcing_more_than_the_limit_is_refused_at_once(server, announced):
    connection = RawConnection(server.grpc_port)
    try:
        stream = connection.start_call("ModelInfer")
        # Three bytes of the announced message, and the stream left open.
        connection.h2.send_data(stream, b"\x00" + announced.to_bytes(4, "big") + b"abc")
        connection.flush()
        headers = grpc_status(connection.events(time.monotonic() + 20 * SECONDS))
    finally:
        connection.close()
    assert headers is not None, "no answer"
    assert headers[b"grpc-status"] == b"8", headers  # RESOURCE_EXHAUSTED
    assert f"larger than max ({announced} vs. {MAX_INPUT})".encode() in \
        headers[b"grpc-message"], headers
    assert_serves(server)


@pytest.mark.parametrize("size", [MAX_HEADER + 1, 4 * MAX_HEADER])
def test_metadata_over_the_header_limit_is_resource_exhausted(server, channel, size):
    live = channel.unary_unary(f"{SERVICE}/ServerLive",
                               request_serializer=pb.ServerLiveRequest.SerializeToString,
                               response_deserializer=pb.ServerLiveResponse.FromString)
    error = refusal(lambda: live(pb.ServerLiveRequest(), metadata=[("x-big", "a" * size)],
                                 timeout=30))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert "metadata" in error.details(), error.details()
    # Under the limit (what grpc counts: names, values and 32 bytes per entry) it passes.
    assert live(pb.ServerLiveRequest(), metadata=[("x-small", "a" * (MAX_HEADER // 2))],
                timeout=30).live


# --- responses (item 8) ---------------------------------------------------------------------


def big_input(elements: int) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", [elements], "FP32")]
    inputs[0].set_data_from_numpy(np.ones(elements, np.float32))
    return inputs


def test_a_response_over_the_limit_is_resource_exhausted_naming_model_output_and_setting(
        server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity_fp32", big_input(MAX_RESPONSE // 4), client_timeout=30)
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        for fragment in ("model 'identity_fp32'", f"output 'OUTPUT0' alone {MAX_RESPONSE}",
                         f"--max-response-size={MAX_RESPONSE}"):
            assert fragment in info.value.message(), info.value.message()
        # Just under the limit: the answer goes out.
        elements = (MAX_RESPONSE - 256) // 4
        result = client.infer("identity_fp32", big_input(elements), client_timeout=30)
        assert result.as_numpy("OUTPUT0").size == elements


def test_a_streamed_response_over_the_limit_is_an_error_in_the_stream(server, channel):
    call = channel.stream_stream(f"{SERVICE}/ModelStreamInfer",
                                 request_serializer=pb.ModelInferRequest.SerializeToString,
                                 response_deserializer=pb.ModelStreamInferResponse.FromString)
    big = infer_request([MAX_RESPONSE // 4], bytes(MAX_RESPONSE))
    small = infer_request([4], bytes(16))
    answers = list(call(iter([big, small]), timeout=30))
    assert "--max-response-size" in answers[0].error_message
    assert "output 'OUTPUT0'" in answers[0].error_message
    assert answers[1].error_message == "" and answers[1].infer_response.raw_output_contents


# --- connection timeouts (item 4) -------------------------------------------------------------


@pytest.fixture(scope="module")
def impatient_server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--grpc-idle-timeout=300",
                      "--grpc-handshake-timeout=300", "--grpc-message-timeout=300") as process:
        yield process


def test_a_call_whose_message_stalls_is_cancelled_after_the_message_timeout(
        impatient_server):
    """Each stalled call held a server thread for as long as the client liked; a thousand of
    them left none to anyone else."""
    connection = RawConnection(impatient_server.grpc_port)
    try:
        streams = set()
        for _ in range(8):
            stream = connection.start_call("ModelInfer")
            connection.h2.send_data(stream, b"\x00" + (1000).to_bytes(4, "big") + b"abc")
            streams.add(stream)
        connection.flush()
        reset = set()
        for event in connection.events(time.monotonic() + 20 * SECONDS):
            if isinstance(event, h2.events.StreamReset):
                reset.add(event.stream_id)
            if reset == streams:
                break
    finally:
        connection.close()
    assert reset == streams
    assert_serves(impatient_server)


def test_a_call_that_ends_without_its_message_is_invalid_argument(impatient_server):
    connection = RawConnection(impatient_server.grpc_port)
    try:
        stream = connection.start_call("ModelInfer")
        connection.h2.end_stream(stream)
        connection.flush()
        headers = grpc_status(connection.events(time.monotonic() + 20 * SECONDS))
    finally:
        connection.close()
    assert headers is not None and headers[b"grpc-status"] == b"3", headers
    assert b"ModelInfer: the call ended without a request message" in \
        headers[b"grpc-message"], headers


def test_a_message_that_arrives_in_time_is_served(impatient_server):
    request = infer_request([4], np.arange(4, dtype=np.float32).tobytes())
    data = request.SerializeToString()
    connection = RawConnection(impatient_server.grpc_port)
    try:
        stream = connection.start_call("ModelInfer")
        connection.h2.send_data(stream, b"\x00" + len(data).to_bytes(4, "big") + data[:5])
        connection.flush()
        time.sleep(0.1 * SECONDS)  # a slow sender, within the 300 ms
        connection.h2.send_data(stream, data[5:], end_stream=True)
        connection.flush()
        headers = grpc_status(connection.events(time.monotonic() + 20 * SECONDS))
    finally:
        connection.close()
    assert headers is not None and headers[b"grpc-status"] == b"0", headers


@pytest.mark.parametrize("sent", [b"", b"PRI * HTTP/2.0\r\n"])
def test_a_connection_that_never_finishes_its_handshake_is_closed(impatient_server, sent):
    with socket.create_connection(("127.0.0.1", impatient_server.grpc_port),
                                  timeout=20 * SECONDS) as sock:
        sock.sendall(sent)
        start = time.monotonic()
        while sock.recv(65536):  # whatever the server says before it closes
            pass
        assert time.monotonic() - start < 15 * SECONDS


def test_a_connection_without_calls_is_closed_after_the_idle_timeout(impatient_server):
    connection = RawConnection(impatient_server.grpc_port)
    try:
        events = list(connection.events(time.monotonic() + 20 * SECONDS))
    finally:
        connection.close()
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events), events
    # A client whose connection was closed for idleness reconnects on its next call.
    with grpcclient.InferenceServerClient(impatient_server.grpc_url) as client:
        assert client.is_server_live(client_timeout=30)
        time.sleep(1.0 * SECONDS)  # idle more than the timeout
        assert client.is_server_live(client_timeout=30)


def test_a_connection_with_a_call_in_progress_is_not_idle(impatient_server):
    with grpc.insecure_channel(impatient_server.grpc_url) as channel:
        call = channel.stream_stream(
            f"{SERVICE}/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString)
        requests: list[pb.ModelInferRequest] = []

        def slowly() -> Iterator[pb.ModelInferRequest]:
            for request in (infer_request([4], bytes(16)), infer_request([4], bytes(16))):
                requests.append(request)
                yield request
                time.sleep(1.0 * SECONDS)  # more than the idle timeout, the stream open

        answers = list(call(slowly(), timeout=30))
    assert [a.error_message for a in answers] == ["", ""]


def test_the_new_flags_are_checked_at_start_up(repo: Path):
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(repo),
         "--grpc-max-header-size=100", "--grpc-idle-timeout=-1",
         "--grpc-handshake-timeout=0", f"--grpc-message-timeout={2**31}"],
        capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode != 0
    for flag in ("--grpc-max-header-size", "--grpc-idle-timeout", "--grpc-handshake-timeout",
                 "--grpc-message-timeout"):
        assert flag in result.stdout + result.stderr, result.stderr
