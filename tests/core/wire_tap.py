"""A recording TCP relay, an HTTP/2 frame reader and a bare HTTP/2 client that only pings,
for tests that check what a gRPC server puts on the wire: compressed messages, keepalive
pings, GOAWAY frames.

The tap listens on a free loopback port and relays each connection to the server, keeping
the bytes the server sent. Plaintext HTTP/2 only: the server's side of a connection is a
plain sequence of frames (a 9-byte header: 24-bit length, type, flags, 31-bit stream id).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import NamedTuple

DATA, HEADERS, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x4, 0x6, 0x7
END_STREAM, ACK, PADDED = 0x1, 0x1, 0x8


class Frame(NamedTuple):
    type: int
    flags: int
    stream: int
    payload: bytes


class GrpcMessage(NamedTuple):
    compressed: bool
    body: bytes


class WireTap:
    """Relays 127.0.0.1:``self.port`` to 127.0.0.1:``target_port``; ``server_bytes(i)`` is
    what the server sent on the i-th connection so far, ``server_closed(i)`` whether it
    closed that connection. ``hold()`` stops relaying what clients send (they see no error:
    the bytes wait in the relay) until ``release()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.received: list[bytearray] = []
        self.closed: list[bool] = []
        self.sockets: list[socket.socket] = []
        self.flowing = threading.Event()
        self.flowing.set()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                index = len(self.received)
                self.received.append(bytearray())
                self.closed.append(False)
                self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, index),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, index: int | None) -> None:
        """Copy ``source`` to ``sink``; ``index``: the connection whose server side this is
        (recorded), or None for a client side (held while the tap holds)."""
        try:
            while chunk := source.recv(65536):
                if index is None:
                    self.flowing.wait()
                else:
                    with self.lock:
                        self.received[index] += chunk
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if index is not None:
            with self.lock:
                self.closed[index] = True

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def server_closed(self, connection: int = 0) -> bool:
        with self.lock:
            return self.closed[connection]

    def connections(self) -> int:
        with self.lock:
            return len(self.received)

    def server_bytes(self, connection: int = 0) -> bytes:
        with self.lock:
            return bytes(self.received[connection])

    def server_frames(self, connection: int = 0) -> list[Frame]:
        return frames(self.server_bytes(connection))

    def close(self) -> None:
        self.release()
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                sock.close()

    def __enter__(self) -> WireTap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def frames(data: bytes) -> list[Frame]:
    """The complete HTTP/2 frames at the start of ``data``."""
    found = []
    offset = 0
    while offset + 9 <= len(data):
        length = int.from_bytes(data[offset:offset + 3], "big")
        kind, flags, stream = struct.unpack(">BBI", data[offset + 3:offset + 9])
        if offset + 9 + length > len(data):
            break
        found.append(Frame(kind, flags, stream & 0x7FFFFFFF, data[offset + 9:offset + 9 + length]))
        offset += 9 + length
    return found


def grpc_messages(found: list[Frame]) -> dict[int, list[GrpcMessage]]:
    """The gRPC messages in the DATA frames, by stream: each is a 1-byte compressed flag, a
    4-byte length and the (possibly compressed) message."""
    streams: dict[int, bytearray] = {}
    for frame in found:
        if frame.type != DATA:
            continue
        payload = frame.payload
        if frame.flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        streams.setdefault(frame.stream, bytearray()).extend(payload)
    messages: dict[int, list[GrpcMessage]] = {}
    for stream, data in streams.items():
        offset = 0
        while offset + 5 <= len(data):
            flag, length = struct.unpack(">BI", data[offset:offset + 5])
            body = bytes(data[offset + 5:offset + 5 + length])
            messages.setdefault(stream, []).append(GrpcMessage(bool(flag), body))
            offset += 5 + length
    return messages


def goaways(found: list[Frame]) -> list[tuple[int, bytes]]:
    """(error code, debug data) of each GOAWAY frame."""
    return [(int.from_bytes(f.payload[4:8], "big"), f.payload[8:])
            for f in found if f.type == GOAWAY]


def pings_sent(found: list[Frame]) -> int:
    """PING frames the sender started (not its acknowledgements of the peer's pings)."""
    return sum(1 for f in found if f.type == PING and not f.flags & ACK)


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + struct.pack(">BBI", kind, flags, stream) + payload


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class PingingClient:
    """An HTTP/2 connection that opens no stream and sends PING frames: what a client with
    aggressive keepalive settings does, minus grpc's own floor of one ping a second."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()
        self.received = bytearray()
        self.closed = False
        self._send(PREFACE + frame(SETTINGS, 0, 0, b""))
        threading.Thread(target=self._read, daemon=True).start()

    def _send(self, data: bytes) -> None:
        with self.send_lock:
            self.sock.sendall(data)

    def _read(self) -> None:
        seen = 0
        try:
            while chunk := self.sock.recv(65536):
                with self.lock:
                    self.received += chunk
                    found = frames(bytes(self.received))
                for settings in found[seen:]:
                    if settings.type == SETTINGS and not settings.flags & ACK:
                        self._send(frame(SETTINGS, ACK, 0, b""))
                seen = len(found)
        except OSError:
            pass
        with self.lock:
            self.closed = True

    def frames(self) -> list[Frame]:
        with self.lock:
            return frames(bytes(self.received))

    def ping(self, count: int, spacing: float, timeout: float = 10.0) -> list[Frame]:
        """Send ``count`` pings ``spacing`` seconds apart (fewer if the server sends a
        GOAWAY), then wait until each is acknowledged or the server closed the connection;
        the server's frames."""
        for number in range(count):
            if goaways(self.frames()):
                break
            try:
                self._send(frame(PING, 0, 0, number.to_bytes(8, "big")))
            except OSError:
                break
            time.sleep(spacing)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.frames()
            acks = sum(1 for f in found if f.type == PING and f.flags & ACK)
            if acks == count or self.closed:
                break
            time.sleep(0.01)
        return self.frames()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> PingingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
