"""Unit tests of naiad.frontends.grpc.sending: which calls flow control holds data back for
(``Sender.held_back``, what a window update for the connection looks at), and the usual
unary answer made in one pass (``GRPCConnection.answer_unary``) against the two steps it
stands for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import grpc
import pytest

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call
from naiad.frontends.grpc.connection import GRPCConnection
from naiad.frontends.grpc.sending import Sender


@pytest.fixture
def sender() -> Iterator[Sender]:
    loop = asyncio.new_event_loop()
    try:
        yield Sender(loop)  # no transport: what it writes is only queued
    finally:
        loop.close()


def test_held_back_holds_exactly_the_calls_with_data_waiting(sender: Sender) -> None:
    sender.window = 10
    first, second, third = (Call(n, "ModelInfer", (), 10) for n in (1, 3, 5))
    sender.data(first, b"x" * 25, 0)  # 10 bytes go (both windows), 15 wait
    assert sender.held_back == {first} and len(first.pending) == 1
    sender.data(second, b"y" * 5, 0)  # the connection's window is spent: all of it waits
    sender.data(third, b"", http2.END_HEADERS)  # trailers are not flow-controlled
    assert sender.held_back == {first, second} and not third.pending
    sender.window += 100  # the connection's window opens; the first call's does not
    assert sender.pending([first, second]) == []
    assert sender.held_back == {first} and not second.pending
    first.send_window += 100
    first.closed = True  # its status was sent: it is over once its data is gone
    assert sender.pending([first]) == [first]
    assert sender.held_back == set() and not first.pending


# --- the usual unary answer in one pass (GRPCConnection.answer_unary) ----------------------


def _connection(loop: asyncio.AbstractEventLoop, compression: int | None = None
                ) -> GRPCConnection:
    """A connection with no transport (what it writes stays in ``sender.out``) of a service
    that has only what answering needs."""
    service = SimpleNamespace(
        loop=loop, options=SimpleNamespace(max_header_size=16384), max_message=1 << 20,
        compression=compression, compressed_methods=frozenset({"ModelInfer"}),
        pick_encoding=lambda accept: b"gzip" if b"gzip" in accept else None,
        compress=lambda message, encoding: b"<" + message + b">")
    return GRPCConnection(service)  # type: ignore[arg-type]


def _answered_both_ways(prepare, message: bytes = b"\x01" * 40, compression=None
                        ) -> tuple[list[bytes], list[bytes], Call, Call]:
    """What ``answer_unary`` and ``send_message`` + ``finish(OK)`` queue, from the same
    state (``prepare(connection, call)`` sets it), and their calls afterwards."""
    loop = asyncio.new_event_loop()
    try:
        results = []
        for way in ("one pass", "two steps"):
            connection = _connection(loop, compression)
            call = Call(7, "ModelInfer", (), 65535)
            call.ended = True
            call.accept = b"gzip"
            connection.calls[7] = call
            prepare(connection, call)
            if way == "one pass":
                connection.answer_unary(call, message)
            else:
                connection.send_message(call, message)
                connection.finish(call, grpc.StatusCode.OK, "")
            results.append((list(connection.sender.out), call, connection))
        (one, one_call, one_connection), (two, two_call, two_connection) = results
        assert one_connection.calls.keys() == two_connection.calls.keys()
        assert one_connection.sender.window == two_connection.sender.window
        return one, two, one_call, two_call
    finally:
        loop.close()


@pytest.mark.parametrize("prepare", [
    lambda connection, call: None,
    lambda connection, call: setattr(call, "ended", False),  # the client may send more
    lambda connection, call: setattr(connection.sender, "window", 30),  # held back
    lambda connection, call: setattr(call, "send_window", 45),  # exactly the message
    lambda connection, call: setattr(call, "send_window", 44),  # a byte short
    lambda connection, call: setattr(connection.sender, "max_frame", 20),
    lambda connection, call: setattr(connection.sender, "table_size", 0),  # update due
    lambda connection, call: setattr(call, "headers_sent", True),
    lambda connection, call: setattr(call, "closed", True),  # cancelled meanwhile
    lambda connection, call: setattr(connection, "closing", True),
], ids=["usual", "not-ended", "connection-window", "call-window-exact", "call-window-short",
        "frame-size",
        "table-update", "headers-sent", "closed", "closing"])
def test_answer_unary_queues_the_two_steps_frames(prepare) -> None:
    one, two, one_call, two_call = _answered_both_ways(prepare)
    assert b"".join(one) == b"".join(two)
    for attribute in ("closed", "headers_sent", "send_window"):
        assert getattr(one_call, attribute) == getattr(two_call, attribute), attribute
    assert list(one_call.pending) == list(two_call.pending)


def test_answer_unary_sends_headers_message_and_status_at_once() -> None:
    one, _, call, _ = _answered_both_ways(lambda connection, call: None, b"hello")
    data = b"".join(one)
    kinds = []
    while data:
        high, low, kind, flags, stream = http2.FRAME_HEADER.unpack_from(data)
        length = (high << 8) | low
        kinds.append((kind, flags, stream, data[9:9 + length]))
        data = data[9 + length:]
    assert [(kind, flags, stream) for kind, flags, stream, _ in kinds] == [
        (http2.HEADERS, http2.END_HEADERS, 7), (http2.DATA, 0, 7),
        (http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, 7)]
    assert kinds[1][3] == b"\x00\x00\x00\x00\x05hello" and kinds[2][3] == http2.OK_TRAILERS
    assert call.closed and call.send_window == 65535 - 10


def test_answer_unary_compresses_as_send_message_does() -> None:
    one, two, _, _ = _answered_both_ways(lambda connection, call: None, compression=6)
    assert b"".join(one) == b"".join(two) and b"<" in b"".join(one)


def test_answer_unary_cancels_the_calls_deadline() -> None:
    loop = asyncio.new_event_loop()
    try:
        connection = _connection(loop)
        call = Call(1, "ModelInfer", (), 65535)
        call.ended = True
        connection.calls[1] = call
        call.deadline = loop.call_later(60, lambda: None)
        connection.answer_unary(call, b"x")
        assert call.deadline.cancelled() and connection.calls == {}
    finally:
        loop.close()
