"""The server's end of a worker's socket, driven by the server's event loop.

Answers are read on the loop (``add_reader``): a worker's reply wakes the loop directly, and
an HTTP request waiting for it is answered right there, without a reader thread to wake
first (one thread switch fewer per request). Sends come from any thread and never block: the
socket is non-blocking, and what it cannot take at once is queued in order and written
when it can (``add_writer``). A send that blocked on the loop could deadlock with a worker
blocked writing its answers, which only the loop reads.

Frames sent on the loop itself are held until the loop has handled every event of its
current round (``call_soon``), then go in one system call. Sent one by one, each woke the
worker, which preempted the loop on a shared core to answer that one request: one context
switch each way per request. Held, the worker wakes once for all the requests that arrived
together and reads them in one go (issue 26: ``benchmarks/results/``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from naiad_backend_python.stub import naiad_stub_plain as plain
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")

# Bytes read per readable event; the loop calls again while more is there.
READ_CHUNK_BYTES = 64 * 1024
# How long closing waits for the loop to let go of the socket.
CLOSE_WAIT_S = 5.0
# Most buffers held for one system call (sendmsg takes at most IOV_MAX = 1024).
HELD_PARTS_MAX = 512

OnFrame = Callable[[dict, memoryview, list[int]], object]
# naiad_stub_plain.read_result's (batch id, per response its outputs, bytes they take)
OnResult = Callable[[int, list[list[Any]], int], object]


class LoopTransport:
    """Frames in and out of ``sock`` on ``loop``. ``on_frame(header, payload, fds)`` and
    ``on_end()`` are called on the loop; ``on_end`` once, when the stream ends. With
    ``on_result``, a plain result whose outputs travel in the message (the one message
    nearly every batch answers with) goes to it read in one pass, without a dict
    (``naiad_stub_plain.read_result``). Bytes that
    are not a frame (:class:`naiad_stub_wire.ProtocolError`) end the stream after
    ``on_fault(reason)``: nothing after them can be read."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop,
                 on_frame: OnFrame, on_end: Callable[[], object],
                 buffered: bytes = b"", fds: Sequence[int] = (),
                 on_fault: Callable[[str], object] | None = None,
                 on_result: OnResult | None = None) -> None:
        self.sock = sock
        self.on_result = on_result
        self.loop = loop
        self.on_frame = on_frame
        self.on_end = on_end
        self.on_fault = on_fault
        self._fd = sock.fileno()
        self._received = bytearray(buffered)
        self._fds: list[int] = list(fds)
        self._chunk = bytearray(READ_CHUNK_BYTES)
        self._chunk_view = memoryview(self._chunk)
        self._lock = threading.Lock()  # guards the outgoing queue
        self._outgoing: collections.deque[tuple[list[Any], list[int]]] = collections.deque()
        self._writing = False
        self._ended = False
        # Frames sent on the loop this round, not written yet (see the module's docstring).
        self._held: list[Any] = []
        self._loop_thread: int | None = None

    def start(self) -> None:
        """Begin reading (from any thread)."""
        self.sock.setblocking(False)
        self.loop.call_soon_threadsafe(self._attach)

    def _attach(self) -> None:
        self._loop_thread = threading.get_ident()
        self.loop.add_reader(self._fd, self._readable)
        if self._received:  # bytes read before the loop took over
            self._parse()

    # --- sending ------------------------------------------------------------------------

    def send(self, header: dict, buffers: Sequence[memoryview] = (),
             fds: Sequence[int] = ()) -> None:
        """Send one frame from any thread, without blocking. Raises
        :class:`naiad_stub_wire.PeerGone` when the stream has ended."""
        self.send_frame(wire.frame_parts(header, buffers, fds), fds)

    def send_frame(self, parts: list[Any], fds: Sequence[int] = ()) -> None:
        """:meth:`send` of a frame made whole already (``naiad_stub_plain``)."""
        with self._lock:
            if self._ended:
                raise wire.PeerGone("the worker's socket is closed")
            held = self._held
            if not fds and threading.get_ident() == self._loop_thread:
                if not held:
                    self.loop.call_soon(self._release_held)
                held += parts
                if len(held) < HELD_PARTS_MAX:
                    return
                parts = []
            if held:  # held frames go first, in order
                parts = held + parts
                self._held = []
            self._write(parts, fds)

    def _release_held(self) -> None:
        """On the loop, after its round: write the frames held during it."""
        with self._lock:
            held, self._held = self._held, []
            if held and not self._ended:
                try:
                    self._write(held, ())
                except wire.PeerGone:
                    pass  # the reader sees the end of the stream and fails what is pending

    def _write(self, parts: list[Any], fds: Sequence[int]) -> None:
        """Write ``parts`` now, or queue what the socket does not take (under the lock)."""
        if not self._outgoing:
            sent = self._send_some(parts, fds)
            if sent is None:
                return
            parts, fds = sent
        # The rest waits for the socket; the descriptors must outlive the caller's.
        self._outgoing.append((parts, [os.dup(fd) for fd in fds]))
        if not self._writing:
            self._writing = True
            self.loop.call_soon_threadsafe(self.loop.add_writer, self._fd, self._flush)

    def _send_some(self, parts: list[Any], fds: Sequence[int]
                   ) -> tuple[list[Any], Sequence[int]] | None:
        """Write what the socket takes now; None when all of it went, else what is left
        (with the descriptors, if none of the frame went yet)."""
        ancillary = ([(socket.SOL_SOCKET, socket.SCM_RIGHTS, wire.fd_array(fds))]
                     if fds else [])
        try:
            sent = self.sock.sendmsg(parts, ancillary)
        except (BlockingIOError, InterruptedError):
            return parts, fds
        except OSError as exc:
            raise wire.PeerGone(str(exc)) from None
        rest = _after(parts, sent)
        if not rest:
            return None
        return rest, (fds if sent == 0 else ())

    def _flush(self) -> None:
        """On the loop, when the socket can take more: write what is queued, in order."""
        with self._lock:
            while self._outgoing:
                parts, fds = self._outgoing[0]
                try:
                    left = self._send_some(parts, fds)
                except wire.PeerGone:
                    left = None
                    self._outgoing.clear()
                if left is not None:
                    self._outgoing[0] = (left[0], list(left[1]))
                    if fds and not left[1]:  # the descriptors went with the first bytes
                        _close_all(fds)
                    return
                self._outgoing.popleft()
                _close_all(fds)
            self._writing = False
            self.loop.remove_writer(self._fd)

    # --- receiving ----------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            received, ancillary, _flags, _address = self.sock.recvmsg_into(
                [self._chunk_view], wire.ANCILLARY_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            received, ancillary = 0, []
        self._fds.extend(wire.fds_from(ancillary))
        if received == 0:
            self._end()
            return
        self._received += self._chunk_view[:received]
        self._parse()

    def _parse(self) -> None:
        """Hand every whole frame received so far to ``on_frame``."""
        data = self._received
        position = 0
        prefix = wire.PREFIX_SIZE
        on_result = self.on_result
        while len(data) - position >= prefix:
            try:
                head_size, payload_size = wire.unpack_prefix(data, position)
                end = position + prefix + head_size + payload_size
                if len(data) < end:
                    break
                head = data[position + prefix:position + prefix + head_size]
                payload = data[end - payload_size:end] if payload_size else bytearray()
                result = None
                if on_result is not None and wire.is_plain_result(head):
                    result = plain.read_result(head, payload)  # None: outputs in the region
                count = 0  # a result brings no descriptors
                if result is None:
                    header = wire.decode_header(head)
                    count = wire.check_header(header, len(self._fds))
            except ValueError as exc:  # not a frame: nothing after it can be read
                self._fault(str(exc))
                return
            position = end
            if count:
                fds, self._fds = self._fds[:count], self._fds[count:]
            else:  # most frames: none
                fds = []
            try:
                if result is not None:
                    on_result(*result)  # type: ignore[misc]
                else:
                    self.on_frame(header, memoryview(payload), fds)
            except Exception:  # the frame is consumed whatever its handler did
                log.exception("handling a message from a worker process failed")
        if position:
            del data[:position]

    def _fault(self, reason: str) -> None:
        """The worker broke the protocol: say so, and end the stream."""
        if self._ended:
            return
        if self.on_fault is not None:
            try:
                self.on_fault(reason)
            except Exception:
                log.exception("handling a worker's protocol fault failed")
        self._received.clear()
        self._end()

    def _end(self) -> None:
        if self._ended:
            return
        with self._lock:
            self._ended = True
            queued = list(self._outgoing)
            self._outgoing.clear()
            self._held = []
        for _parts, fds in queued:
            _close_all(fds)
        _close_all(self._fds)
        self._fds = []
        self.loop.remove_reader(self._fd)
        if self._writing:
            self.loop.remove_writer(self._fd)
        self.on_end()

    # --- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop reading and close the socket (from any thread but the loop's)."""
        released = threading.Event()

        def release() -> None:
            self._end()
            released.set()

        try:
            self.loop.call_soon_threadsafe(release)
        except RuntimeError:  # the loop is closed: nothing reads the socket any more
            released.set()
        released.wait(CLOSE_WAIT_S)
        self.sock.close()


def _after(parts: list[Any], sent: int) -> list[Any]:
    """What of ``parts`` is left after ``sent`` bytes went."""
    if sent >= sum(map(len, parts)):  # the usual case, without a loop in Python
        return []
    for index, part in enumerate(parts):
        size = len(part)
        if sent < size:
            return [memoryview(part)[sent:], *parts[index + 1:]]
        sent -= size
    return []


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)
