"""naiad's own HTTP/2 server (``--grpc-server=naiad``) on the wire: what tritonclient and
grpc's channel do not show on their own (flow control past the default windows, header
blocks split over CONTINUATION frames, padding, compressed requests, frames a client may
not send). Everything else of the gRPC frontend is tested against both servers by the rest
of this folder."""

from __future__ import annotations

import gzip
import socket
import struct
from pathlib import Path

import grpc
import hpack
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from wire_tap import frames, goaways
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.frontends.grpc import http2
from naiad.testing import naiad_server

INFER_PATH = b"/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    repo: Path = tmp_path_factory.mktemp("identity-repo")
    write_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    with naiad_server("--model-repository", str(repo), "--grpc-server=naiad") as running:
        yield running


def infer_message(values: np.ndarray) -> bytes:
    request = pb.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(values.shape))
    request.raw_input_contents.append(values.tobytes())
    body = request.SerializeToString()
    return struct.pack(">BL", 0, len(body)) + body


def request_headers(extra: list[tuple[bytes, bytes]] = ()) -> bytes:
    return hpack.Encoder().encode([
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", INFER_PATH),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers"), *extra])


class RawClient:
    """A client that writes frames as given and reads what the server sends back."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.received = b""

    def send(self, *data: bytes) -> None:
        self.sock.sendall(b"".join(data))

    def open(self) -> None:
        self.send(http2.PREFACE, http2.settings_frame({}))

    def read_until(self, done, limit_s: float = 30.0) -> list:
        self.sock.settimeout(limit_s)
        while True:
            found = frames(self.received)
            if done(found):
                return found
            chunk = self.sock.recv(65536)
            if not chunk:
                return frames(self.received)
            self.received += chunk

    def close(self) -> None:
        self.sock.close()


def trailers_of(found: list, stream: int) -> list[tuple[bytes, bytes]] | None:
    """The decoded header blocks the server sent on ``stream`` that end it."""
    decoder = hpack.Decoder()
    ended = None
    for item in found:
        if item.type == http2.HEADERS:
            headers = [(bytes(k), bytes(v)) for k, v in decoder.decode(item.payload, raw=True)]
            if item.stream == stream and item.flags & http2.END_STREAM:
                ended = headers
    return ended


def ended(stream: int):
    return lambda found: any(f.type == http2.HEADERS and f.stream == stream
                             and f.flags & http2.END_STREAM for f in found)


def test_messages_larger_than_every_window_go_both_ways(server) -> None:
    # 6 MiB each way: past the default 64 KiB windows, naiad's 4 MiB stream window and
    # many 16 KiB frames; the client's windows hold the response back until it reads.
    values = np.arange(6 * 1024 * 1024 // 4, dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput("INPUT0", list(values.shape), "FP32")]
        inputs[0].set_data_from_numpy(values)
        for _ in range(2):
            result = client.infer("identity_fp32", inputs, client_timeout=60)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_a_gzip_request_is_decompressed(server) -> None:
    values = np.zeros(4096, dtype=np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput("INPUT0", list(values.shape), "FP32")]
        inputs[0].set_data_from_numpy(values)
        result = client.infer("identity_fp32", inputs, compression_algorithm="gzip")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_continuation_frames_and_padding_are_understood(server) -> None:
    client = RawClient(server.grpc_port)
    try:
        client.open()
        block = request_headers([(b"x-filler", b"f" * 3000)])
        first, second, third = block[:10], block[10:1000], block[1000:]
        message = infer_message(np.ones(4, dtype=np.float32))
        padded = bytes([7]) + message + b"\0" * 7
        client.send(http2.frame(http2.HEADERS, 0, 1, first),
                    http2.frame(http2.CONTINUATION, 0, 1, second),
                    http2.frame(http2.CONTINUATION, http2.END_HEADERS, 1, third),
                    http2.frame(http2.DATA, http2.PADDED | http2.END_STREAM, 1, padded))
        found = client.read_until(ended(1))
        assert (b"grpc-status", b"0") in trailers_of(found, 1)
        data = b"".join(f.payload for f in found if f.type == http2.DATA and f.stream == 1)
        response = pb.ModelInferResponse.FromString(data[5:])
        assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [1] * 4
    finally:
        client.close()


def test_an_unknown_method_is_unimplemented(server) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/NoSuchRpc")
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "NoSuchRpc" in info.value.details()


def test_an_oversized_message_is_refused_as_soon_as_it_is_announced(server) -> None:
    client = RawClient(server.grpc_port)
    try:
        client.open()
        # Announces 1 GiB (over --http-max-input-size) and sends 5 bytes of it.
        client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, 1, request_headers()),
                    http2.frame(http2.DATA, 0, 1, struct.pack(">BL", 0, 2**30) + b"x" * 5))
        found = client.read_until(ended(1))
        trailers = dict(trailers_of(found, 1))
        assert trailers[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED
        assert b"--http-max-input-size" in trailers[b"grpc-message"]
    finally:
        client.close()


OPENED = http2.PREFACE + http2.settings_frame({})


@pytest.mark.parametrize(("opening", "code"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", http2.PROTOCOL_ERROR),  # not HTTP/2
    (OPENED + http2.frame(http2.PUSH_PROMISE, 0, 1, b"\0" * 4), http2.PROTOCOL_ERROR),
    (OPENED + http2.frame(http2.HEADERS, http2.END_HEADERS, 2, request_headers()),
     http2.PROTOCOL_ERROR),  # a client opens odd streams only
    (OPENED + http2.frame(http2.WINDOW_UPDATE, 0, 0, b"\0\0\1"), http2.FRAME_SIZE_ERROR),
    (OPENED + http2.frame(http2.PING, 0, 0, b"\0" * 7), http2.FRAME_SIZE_ERROR),
    (OPENED + http2.frame(http2.DATA, 0, 1, b"\0" * 20_000), http2.FRAME_SIZE_ERROR),
], ids=["http1", "push", "even-stream", "short-window-update", "short-ping", "oversized"])
def test_a_protocol_error_ends_that_connection_only(server, opening: bytes,
                                                    code: int) -> None:
    client = RawClient(server.grpc_port)
    try:
        client.send(opening)
        found = client.read_until(lambda found: bool(goaways(found)))
        assert goaways(found)[0][0] == code
    finally:
        client.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as other:
        assert other.is_server_live()


def test_a_gzip_message_that_inflates_past_the_limit_is_refused(tmp_path: Path) -> None:
    write_model(tmp_path, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    with naiad_server("--model-repository", str(tmp_path), "--grpc-server=naiad",
                      "--http-max-input-size=65536") as small:
        client = RawClient(small.grpc_port)
        try:
            client.open()
            body = gzip.compress(infer_message(np.zeros(100_000, dtype=np.float32))[5:])
            client.send(
                http2.frame(http2.HEADERS, http2.END_HEADERS, 1,
                            request_headers([(b"grpc-encoding", b"gzip")])),
                http2.frame(http2.DATA, http2.END_STREAM, 1,
                            struct.pack(">BL", 1, len(body)) + body))
            trailers = dict(trailers_of(client.read_until(ended(1)), 1))
            assert trailers[b"grpc-status"] == b"8"
            assert b"--http-max-input-size" in trailers[b"grpc-message"]
        finally:
            client.close()


def test_data_past_the_connection_window_ends_that_connection(tmp_path: Path) -> None:
    # With 1 MiB messages the connection's window is 16 MiB, and it comes back only as
    # messages are handed on: 17 half-sent calls of almost 1 MiB each overrun it.
    write_model(tmp_path, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    with naiad_server("--model-repository", str(tmp_path),
                      "--http-max-input-size=1048576") as small:
        client = RawClient(small.grpc_port)
        try:
            client.open()
            chunk = b"\0" * 16_000
            for stream in range(1, 35, 2):
                client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, stream,
                                        request_headers()),
                            http2.frame(http2.DATA, 0, stream,
                                        struct.pack(">BL", 0, 1_040_000) + chunk))
                for _ in range(64):  # ~1 MiB, the message never complete
                    client.send(http2.frame(http2.DATA, 0, stream, chunk))
            found = client.read_until(lambda found: bool(goaways(found)))
            assert goaways(found)[0][0] == http2.FLOW_CONTROL_ERROR
        except (BrokenPipeError, ConnectionResetError):
            found = frames(client.received)  # closed while we were still sending
            assert goaways(found) and goaways(found)[0][0] == http2.FLOW_CONTROL_ERROR
        finally:
            client.close()
        with grpcclient.InferenceServerClient(small.grpc_url) as other:
            assert other.is_server_live()


def test_binary_metadata_that_is_not_base64_is_refused(server) -> None:
    client = RawClient(server.grpc_port)
    try:
        client.open()
        client.send(http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, 1,
                                request_headers([(b"x-blob-bin", b"a")])))
        trailers = dict(trailers_of(client.read_until(ended(1)), 1))
        assert trailers[b"grpc-status"] == b"3"  # INVALID_ARGUMENT
        assert b"x-blob-bin" in trailers[b"grpc-message"]
    finally:
        client.close()
    with grpcclient.InferenceServerClient(server.grpc_url) as other:
        assert other.is_server_live()


def test_repeated_header_blocks_are_read_as_each_says(server) -> None:
    """A client's repeated header block decodes to the very list the connection read before,
    whose call headers it reuses; every other block is read anew: a call to another method,
    and one with a deadline, between calls that repeat the first block."""
    encoder = hpack.Encoder()  # one per connection, as a client's: indexed fields repeat

    def headers(path: bytes = INFER_PATH, extra: list[tuple[bytes, bytes]] = ()) -> bytes:
        return encoder.encode([(b":method", b"POST"), (b":scheme", b"http"),
                               (b":path", path), (b":authority", b"localhost"),
                               (b"content-type", b"application/grpc"), (b"te", b"trailers"),
                               *extra])

    calls = [headers(), headers(), headers(), headers(b"/inference.GRPCInferenceService/Nope"),
             headers(extra=[(b"grpc-timeout", b"1n")]), headers(), headers()]
    expected = [b"0", b"0", b"0", b"12", b"4", b"0", b"0"]  # OK, UNIMPLEMENTED, DEADLINE
    # the blocks a client repeats (new table entries renumber the indexed fields between)
    assert calls[1] == calls[2] and calls[5] == calls[6] != calls[1]
    client = RawClient(server.grpc_port)
    try:
        client.open()
        message = infer_message(np.arange(4, dtype=np.float32))
        statuses = []
        for index, block in enumerate(calls):
            stream = 2 * index + 1
            client.send(http2.frame(http2.HEADERS, http2.END_HEADERS, stream, block),
                        http2.frame(http2.DATA, http2.END_STREAM, stream, message))
            trailers = trailers_of(client.read_until(ended(stream)), stream)
            statuses.append(dict(trailers)[b"grpc-status"])
        assert statuses == expected
    finally:
        client.close()
