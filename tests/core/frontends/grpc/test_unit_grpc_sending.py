"""Unit tests of naiad.frontends.grpc.sending: which calls flow control holds data back for
(``Sender.held_back``, what a window update for the connection looks at)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from naiad.frontends.grpc import http2
from naiad.frontends.grpc.call import Call
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
