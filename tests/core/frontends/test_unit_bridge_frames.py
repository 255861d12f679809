"""The frames of a plain inference between a frontend process and the engine
(``naiad.frontends.bridge.frames``: INFER and ANSWER), and how a frontend reads the engine's
answer when the engine ran the request in the application instead (a RESPONSE); the frames
of a gRPC call answered on the engine's loop, and the engine's end of a forwarded stream
(``stream_engine.ForwardedStreamCall``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from naiad.frontends.bridge import frames
from naiad.frontends.bridge.frontend import _answer_of
from naiad.frontends.bridge.stream_engine import ForwardedStreamCall
from naiad.frontends.http.infer import Answer, infer_headers


def body_of(data: bytes) -> memoryview:
    """A frame's body, as FrameProtocol hands it over."""
    return memoryview(data)[frames.HEAD_SIZE:]


@pytest.mark.parametrize("headers", [
    [(b"host", b"x"), (b"inference-header-content-length", b"12"),
     (b"content-encoding", b"gzip"), (b"accept-encoding", b"deflate, gzip"),
     (b"content-length", b"6"), (b"x-caf\xe9", b"\xff latin-1 \x80")],
    [(b"inference-header-content-length", b"not a number")],  # the engine refuses it
    [(b"accept-encoding", b"gzip, " * 12_000)],  # past 64 KiB (--http-max-header-size)
    [],
])
def test_an_infer_frame_carries_names_headers_and_body_as_they_came(headers) -> None:
    heads = infer_headers(headers)
    data = frames.infer_frame(7, "m\u00e9ta/名前", "3", heads, headers, b"\x00body\xff")
    assert data[4] == frames.INFER
    name, version, read_heads, read_headers, body = frames.read_infer(body_of(data))
    assert (name, version, read_heads, body) == ("m\u00e9ta/名前", "3", heads, b"\x00body\xff")
    assert list(read_headers) == headers and len(read_headers) == len(headers)


@pytest.mark.parametrize("answer", [Answer(200, b'{"outputs":[]}'),
                                    Answer(200, b"{}\x00\x01", 2, "gzip"),
                                    Answer(501, b'{"error":"decoupled"}', None, None)])
def test_an_answer_frame_gives_the_frontend_the_engines_answer(answer: Answer) -> None:
    data = frames.answer_frame(9, *answer)
    assert data[4] == frames.ANSWER
    assert _answer_of(frames.ANSWER, body_of(data)) == answer


def test_a_response_from_the_application_becomes_the_same_answer() -> None:
    headers = [["content-length", "6"], ["content-type", "application/octet-stream"],
               ["inference-header-content-length", "2"], ["content-encoding", "deflate"]]
    data = frames.with_json(frames.RESPONSE, 4, [200, headers], False, b"{}\x01\x02\x03\x04")
    assert _answer_of(frames.RESPONSE, body_of(data)) == \
        Answer(200, b"{}\x01\x02\x03\x04", 2, "deflate")


def test_an_answer_the_engine_abandoned_is_an_internal_error() -> None:
    unfinished = frames.with_json(frames.RESPONSE, 4, [200, []], True, b"{")
    for kind, body in ((frames.ABORT, memoryview(b"")),
                       (frames.RESPONSE, body_of(unfinished))):
        answer = _answer_of(kind, body)
        assert answer.status == 500 and b"ended the answer" in answer.body


def test_a_grpc_infer_frame_carries_metadata_and_the_request_message() -> None:
    metadata = (("x-text", "valeur é"), ("x-blob-bin", b"\x00\xff\x80"))
    data = frames.call_frame(5, "ModelInfer", False, None, frames.metadata_of(metadata),
                             b"\x0a\x03abc", kind=frames.GRPC_INFER)
    assert data[4] == frames.GRPC_INFER
    method, streaming, seconds_left, carried, request = frames.read_call(body_of(data))
    assert (method, streaming, seconds_left, request) == ("ModelInfer", False, None,
                                                          b"\x0a\x03abc")
    assert frames.metadata_from(carried) == metadata


@pytest.mark.parametrize(("code", "details", "message"), [
    (0, "", b"\x0a\x08identity"),
    (0, "", b""),  # an empty response message is still a message
    (3, "model 'm': tensor 'INPUT0' expects FP32 — got INT8", None),
])
def test_a_grpc_answer_frame_gives_the_status_and_the_response(code: int, details: str,
                                                               message: bytes | None) -> None:
    data = frames.grpc_answer_frame(11, code, details, message)
    assert data[4] == frames.GRPC_ANSWER
    assert frames.read_grpc_answer(body_of(data)) == (code, details, message, False)


@pytest.mark.parametrize(("code", "now", "details"), [
    (0, False, ""),
    (8, True, "ModelStreamInfer: more than --stream-max-buffered-responses=48 — ended"),
])
def test_a_stream_end_frame_gives_the_status_and_whether_to_drop_what_waits(
        code: int, now: bool, details: str) -> None:
    data = frames.stream_end_frame(5, code, details, now)
    assert data[4] == frames.STREAM_END
    assert frames.read_stream_end(body_of(data)) == (code, now, details)


class _RecordingStream:
    """What ForwardedStreamCall hands a LoopStream, recorded."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_message(self, message: bytes) -> None:
        self.seen.append(("message", message))

    def on_client_end(self) -> None:
        self.seen.append(("client end",))

    def resume(self) -> None:
        self.seen.append(("resume",))

    def call_over(self) -> None:
        self.seen.append(("over",))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


def _forwarded_call(loop: asyncio.AbstractEventLoop
                    ) -> tuple[ForwardedStreamCall, _RecordingStream, list[bytes], dict]:
    written: list[bytes] = []
    streams: dict = {}
    call = ForwardedStreamCall(7, (("k", "v"),), written.append, streams, loop)
    stream = call.stream = _RecordingStream()
    call.on_cancel = lambda: stream.seen.append(("cancelled",))
    return call, stream, written, streams


def test_a_forwarded_stream_takes_the_frontends_frames_and_keeps_its_window(
        loop: asyncio.AbstractEventLoop) -> None:
    call, stream, written, streams = _forwarded_call(loop)
    assert streams == {7: call}
    call.on_frame(frames.MESSAGE, body_of(frames.message_frame(7, b"request")))
    call.on_frame(frames.HALF_CLOSE, body_of(frames.frame(frames.HALF_CLOSE, 7)))
    assert stream.seen == [("message", b"request"), ("client end",)]
    half = b"r" * (frames.ANSWER_WINDOW_BYTES // 2)
    for _ in range(2):
        assert call.may_send(call)
        call.send_message(call, half)
    assert not call.may_send(call)  # a window's worth is in flight, none reported SENT
    assert [frames.read_body(body_of(data))[1] for data in written] == [half, half]
    call.on_frame(frames.SENT, body_of(frames.sent_frame(7, len(half))))
    assert call.may_send(call) and stream.seen[-1] == ("resume",)
    call.finish(call, grpc.StatusCode.OK, "")
    assert frames.read_stream_end(body_of(written[-1])) == (0, False, "")
    assert streams == {} and stream.seen[-1] == ("over",)
    call.send_message(call, b"late")
    call.end_now(call, grpc.StatusCode.RESOURCE_EXHAUSTED, "late")
    assert len(written) == 3  # nothing after its end


def test_a_forwarded_stream_the_client_left_is_cancelled_and_over(
        loop: asyncio.AbstractEventLoop) -> None:
    call, stream, written, streams = _forwarded_call(loop)
    call.on_frame(frames.DISCONNECT, body_of(frames.frame(frames.DISCONNECT, 7)))
    assert stream.seen == [("cancelled",), ("over",)]
    assert streams == {} and written == []
    call.finish(call, grpc.StatusCode.CANCELLED, "")
    assert written == []  # the frontend ended the call: the engine writes nothing more


@pytest.mark.parametrize("reads", [
    "whole frames, one per read",
    "several frames in one read",
    "frames split across reads",
    "a frame and the start of the next",
])
def test_frames_arrive_whole_however_the_reads_cut_them(reads: str) -> None:
    sent = [frames.frame(frames.BODY, number, bytes([number]) * number * 7)
            for number in range(1, 6)]
    stream = b"".join(sent)
    if reads == "whole frames, one per read":
        chunks = sent
    elif reads == "several frames in one read":
        chunks = [stream[:len(sent[0]) + len(sent[1])], stream[len(sent[0]) + len(sent[1]):]]
    elif reads == "frames split across reads":
        chunks = [stream[i:i + 3] for i in range(0, len(stream), 3)]
    else:
        cut = len(sent[0]) + 4
        chunks = [stream[:cut], stream[cut:]]
    got: list[tuple[int, int, bytes]] = []
    protocol = frames.FrameProtocol(
        lambda kind, exchange, body: got.append((kind, exchange, bytes(body))), lambda: None)
    for chunk in chunks:
        protocol.data_received(chunk)
    assert got == [(frames.BODY, number, bytes([number]) * number * 7)
                   for number in range(1, 6)]
    assert not protocol._received  # nothing left over
