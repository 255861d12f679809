"""The server's end of a worker's socket (``isolated/transport.py``): frames sent on the event
loop are held until the loop's round ends and then go together, in order; frames from other
threads and frames carrying descriptors keep that order."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from naiad_backend_python.isolated.transport import LoopTransport
from naiad_backend_python.stub import naiad_stub_wire as wire


@pytest.fixture
def ends() -> Iterator[tuple[socket.socket, socket.socket]]:
    server_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield server_end, worker_end
    server_end.close()
    worker_end.close()


def readable_now(sock: socket.socket) -> bytes:
    """What ``sock`` holds right now (b"" when nothing)."""
    sock.setblocking(False)
    try:
        return sock.recv(1 << 16)
    except BlockingIOError:
        return b""


def frames_in(data: bytes) -> list[str]:
    """The ``op`` of every whole frame in ``data``."""
    ops, position = [], 0
    while position < len(data):
        head_size, payload_size = wire.unpack_prefix(data, position)
        start = position + wire.PREFIX_SIZE
        ops.append(wire.decode_header(data[start:start + head_size])["op"])
        position = start + head_size + payload_size
    return ops


async def started(server_end: socket.socket) -> LoopTransport:
    transport = LoopTransport(server_end, asyncio.get_running_loop(), lambda *frame: None,
                              lambda: None)
    transport.start()
    await asyncio.sleep(0)  # _attach runs
    return transport


def test_frames_sent_in_one_round_of_the_loop_go_together_after_it(ends):
    server_end, worker_end = ends

    async def scenario() -> tuple[bytes, bytes]:
        transport = await started(server_end)
        for index in range(3):
            transport.send({"op": f"frame{index}"})
        during = readable_now(worker_end)
        await asyncio.sleep(0)  # the round ends
        return during, readable_now(worker_end)

    during, after = asyncio.run(scenario())
    assert during == b""
    assert frames_in(after) == ["frame0", "frame1", "frame2"]


def test_a_frame_from_another_thread_goes_after_the_held_ones(ends):
    server_end, worker_end = ends

    async def scenario() -> bytes:
        transport = await started(server_end)
        transport.send({"op": "held"})
        other = threading.Thread(target=transport.send, args=({"op": "other thread"},))
        other.start()
        other.join()
        data = readable_now(worker_end)  # the other thread's send wrote both
        await asyncio.sleep(0)
        return data + readable_now(worker_end)

    assert frames_in(asyncio.run(scenario())) == ["held", "other thread"]


def test_a_frame_with_descriptors_is_not_held_and_keeps_its_place(ends):
    server_end, worker_end = ends
    read_fd, write_fd = os.pipe()

    async def scenario() -> tuple[bytes, list[int]]:
        transport = await started(server_end)
        transport.send({"op": "held"})
        transport.send({"op": "with fd"}, (), [read_fd])
        worker_end.setblocking(False)
        data, ancillary, _flags, _address = worker_end.recvmsg(1 << 16, wire.ANCILLARY_SPACE)
        return data, wire.fds_from(ancillary)

    try:
        data, fds = asyncio.run(scenario())
        assert frames_in(data) == ["held", "with fd"]
        assert len(fds) == 1
        wire.close_fds(fds)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_held_frames_of_an_ended_stream_are_dropped_and_later_sends_refused(ends):
    server_end, worker_end = ends

    async def scenario() -> None:
        transport = await started(server_end)
        transport.send({"op": "held"})
        transport._end()  # the worker went away (the reader saw the end of the stream)
        await asyncio.sleep(0)
        with pytest.raises(wire.PeerGone):
            transport.send({"op": "too late"})

    asyncio.run(scenario())
    assert readable_now(worker_end) == b""
