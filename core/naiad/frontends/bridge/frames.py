"""The frames between a frontend process and the engine, on one Unix stream socket.

A frame is ``<u32 size of the rest> <u8 kind> <u32 exchange id> <body>``; an exchange is one
HTTP request and its answer, numbered by the frontend. Frontend -> engine:

- ``REQUEST``: ``<u32 scope size> <scope: JSON> <u8 more body>`` and the first body bytes;
- ``BODY``: ``<u8 more body>`` and the next body bytes;
- ``DISCONNECT``: the client went away (the application's ``receive`` says so);
- ``SENT``: ``<u64 bytes>``: that many answer body bytes of the exchange were handed to the
  client's connection (its writer took them). The engine keeps at most
  :data:`ANSWER_WINDOW_BYTES` of an answer's body sent and not yet ``SENT`` back, and its
  ``send`` waits meanwhile, as a single-process server's waits for a slow client's socket:
  a ``generate_stream`` whose client does not read backs up into its stream bound
  (``--stream-max-buffered-responses``) instead of into the frontend process's memory.

Engine -> frontend:

- ``RESPONSE``: ``<u32 head size> <[status, headers]: JSON> <u8 more body>`` and the first
  body bytes (the application's ``http.response.start`` and first body message in one);
- ``BODY``: as above, the answer's next bytes;
- ``ABORT``: the application ended without finishing its answer: close the connection.

Headers travel as latin-1 strings (HTTP header bytes map one to one).

A plain inference (:mod:`naiad.frontends.http.protocol` takes it off the parser, no ASGI on
either side) is an exchange of two frames:

- frontend -> engine ``INFER``: the sizes of what follows and the Content-Length
  (``_INFER_HEAD``), the model name, the version, the three headers the engine reads
  (Inference-Header-Content-Length, Content-Encoding, Accept-Encoding: the frontend's
  :class:`~naiad.frontends.http.infer.InferHeaders`), every header as JSON (read only
  for header forwarding) and the whole body (``DISCONNECT`` when the client leaves);
- engine -> frontend ``ANSWER``: ``<u16 status> <i64 JSON part's size, -1: JSON body>
  <u8 size> <Content-Encoding>`` and the body: an
  :class:`~naiad.frontends.http.infer.Answer`, which the frontend writes as the engine
  would. The engine may answer a ``REQUEST``'s way instead (``RESPONSE``, when it runs the
  request in the application: while it traces).

A gRPC call other than ``ModelInfer`` and ``ModelStreamInfer`` (all of them, when the
frontend serves no HTTP and so has no first connection) is an exchange on a second
connection (:mod:`.grpc_forwarding`):

- frontend -> engine ``CALL``: ``<u8 streaming> <f64 seconds left, -1: no deadline>
  <u16 method size> <method> <u32 metadata size> <metadata: JSON>`` and, for a unary call,
  the request message; then, for a stream, a ``MESSAGE`` per request and ``HALF_CLOSE``
  when the client is done sending; ``DISCONNECT`` when the call ended on the client's side;
- engine -> frontend: a ``MESSAGE`` per response (``<u8 uncompressed>`` and its bytes),
  then ``STATUS`` (``<u8 code>`` and the details, UTF-8), which ends the call.

A unary ``ModelInfer`` that a frontend's gRPC server takes (naiad's or grpc's:
:mod:`.grpc_loop_calls`) goes on the first connection instead, where the engine answers it
on its event loop, as a single-process server does (:mod:`naiad.frontends.grpc.loop_infer`):
``GRPC_INFER`` (a ``CALL``'s body) and ``GRPC_ANSWER`` (``<u8 code> <u8 uncompressed>
<u32 size> <details>`` and the response message when the code is OK); ``DISCONNECT`` when
the call ended on the client's side.

So does a ``ModelStreamInfer`` that a frontend's gRPC server takes (naiad's:
:class:`.frontend.ForwardedStreams`; grpc's: :class:`.grpc_loop_calls.ThreadStream`; the
engine's end: :mod:`.stream_engine`), with no engine thread however long it is open:
``GRPC_STREAM`` (a ``CALL``'s body, no request), then ``MESSAGE``, ``HALF_CLOSE`` and
``DISCONNECT`` as on the second connection, and ``SENT`` as the client's connection takes
the responses; the engine answers with a
``MESSAGE`` per response and ``STREAM_END`` (``<u8 code> <u8 now>`` and the details;
``now``: what the frontend still holds of the answers is dropped, as a single-process
server drops it for a client that does not read). The engine keeps at most
:data:`ANSWER_WINDOW_BYTES` of a stream's responses sent and not yet ``SENT`` back.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from naiad.frontends.http.infer import InferHeaders

REQUEST, BODY, DISCONNECT, RESPONSE, ABORT = 1, 2, 3, 4, 5
CALL, MESSAGE, HALF_CLOSE, STATUS = 6, 7, 8, 9
INFER, ANSWER = 10, 11
GRPC_INFER, GRPC_ANSWER = 12, 13
SENT = 14
GRPC_STREAM, STREAM_END = 15, 16
#: The most answer body bytes of one exchange in flight between the engine and the client's
#: connection in the frontend (the frontend's own writer buffers up to uvicorn's high-water
#: mark on top). Large enough that an answer read at speed never waits on the round trip.
ANSWER_WINDOW_BYTES = 256 * 1024
_COUNT = struct.Struct("<Q")

_HEAD = struct.Struct("<IBI")  # size of the rest, kind, exchange id
_SIZE = struct.Struct("<I")
_MORE = struct.Struct("<B")
HEAD_SIZE = _HEAD.size
# The largest frame accepted: a frame announcing more is a broken peer, not a message. The
# engine's own limits (--max-input-size...) apply to what a frame carries.
MAX_FRAME_BYTES = 1 << 31

OnFrame = Callable[[int, int, memoryview], object]


def frame(kind: int, exchange: int, *parts: bytes | memoryview) -> bytes:
    body = b"".join(parts)
    return _HEAD.pack(len(body) + 5, kind, exchange) + body


def with_json(kind: int, exchange: int, document: Any, more: bool,
              data: bytes | memoryview) -> bytes:
    """A REQUEST or RESPONSE frame: a JSON document, the more-body flag, the first bytes."""
    head = orjson.dumps(document)
    return frame(kind, exchange, _SIZE.pack(len(head)), head, _MORE.pack(more), data)


def body_frame(exchange: int, more: bool, data: bytes | memoryview) -> bytes:
    return frame(BODY, exchange, _MORE.pack(more), data)


def read_json(body: memoryview) -> tuple[Any, bool, bytes]:
    """(document, more body, body bytes) of a REQUEST or RESPONSE frame's body."""
    (size,) = _SIZE.unpack_from(body, 0)
    document = orjson.loads(body[4:4 + size])
    return document, bool(body[4 + size]), bytes(body[5 + size:])


def read_body(body: memoryview) -> tuple[bool, bytes]:
    return bool(body[0]), bytes(body[1:])


def sent_frame(exchange: int, count: int) -> bytes:
    """``count`` body bytes of ``exchange``'s answer reached the client's connection."""
    return frame(SENT, exchange, _COUNT.pack(count))


def read_sent(body: memoryview) -> int:
    return int(_COUNT.unpack_from(body, 0)[0])


_ANSWER_HEAD = struct.Struct("<HqB")


# An INFER frame's fixed part: the sizes of the model name, the version,
# Inference-Header-Content-Length (-1: absent), Content-Encoding, Accept-Encoding and the
# headers' JSON, then Content-Length (-1: absent).
_INFER_HEAD = struct.Struct("<IIiIIIq")


def infer_frame(exchange: int, model_name: str, version: str, heads: InferHeaders,
                headers: Sequence[tuple[bytes, bytes]], body: bytes) -> bytes:
    """A plain inference: what the engine reads of its headers (``heads``) as fields, and
    every header as JSON, which only header forwarding reads (:class:`ForwardedHeaders`)."""
    name, number = model_name.encode("utf-8"), version.encode("utf-8")
    length = heads.header_length
    encoding, accept = heads.encoding.encode("latin-1"), heads.accept.encode("latin-1")
    head = orjson.dumps([[key.decode("latin-1"), value.decode("latin-1")]
                         for key, value in headers])
    content_length = heads.content_length
    return frame(INFER, exchange, _INFER_HEAD.pack(
        len(name), len(number), -1 if length is None else len(length), len(encoding),
        len(accept), len(head), -1 if content_length is None else content_length),
        name, number, length or b"", encoding, accept, head, body)


def read_infer(body: memoryview) -> tuple[str, str, InferHeaders, ForwardedHeaders, bytes]:
    """(model name, version, the headers the engine reads, every header, request body) of
    an INFER frame."""
    (name_size, number_size, length_size, encoding_size, accept_size, head_size,
     content_length) = _INFER_HEAD.unpack_from(body, 0)
    start = _INFER_HEAD.size
    end = start + name_size
    model_name = str(body[start:end], "utf-8")
    start, end = end, end + number_size
    version = str(body[start:end], "utf-8")
    length = None
    if length_size >= 0:
        start, end = end, end + length_size
        length = bytes(body[start:end])
    start, end = end, end + encoding_size
    encoding = str(body[start:end], "latin-1")
    start, end = end, end + accept_size
    accept = str(body[start:end], "latin-1")
    start, end = end, end + head_size
    headers = ForwardedHeaders(bytes(body[start:end]))
    heads = InferHeaders(None if content_length < 0 else content_length, length, encoding,
                         accept)
    return model_name, version, heads, headers, bytes(body[end:])


class ForwardedHeaders(Sequence[tuple[bytes, bytes]]):
    """An INFER frame's request headers, decoded from their JSON when first looked at: only
    header forwarding (``--http-header-forward-pattern``) and the application's path (while
    the engine traces) read them all."""

    __slots__ = ("_data", "_headers")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._headers: list[tuple[bytes, bytes]] | None = None

    def _decoded(self) -> list[tuple[bytes, bytes]]:
        headers = self._headers
        if headers is None:
            headers = self._headers = [(key.encode("latin-1"), value.encode("latin-1"))
                                       for key, value in orjson.loads(self._data)]
        return headers

    def __getitem__(self, index: Any) -> Any:
        return self._decoded()[index]

    def __len__(self) -> int:
        return len(self._decoded())

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._decoded())


def answer_frame(exchange: int, status: int, body: bytes, json_length: int | None,
                 encoding: str | None) -> bytes:
    coding = (encoding or "").encode("ascii")
    return frame(ANSWER, exchange,
                 _ANSWER_HEAD.pack(status, -1 if json_length is None else json_length,
                                   len(coding)), coding, body)


def read_answer(body: memoryview) -> tuple[int, bytes, int | None, str | None]:
    """(status, body, JSON part's size or None, Content-Encoding or None) of an ANSWER."""
    status, json_length, coding_size = _ANSWER_HEAD.unpack_from(body, 0)
    start = _ANSWER_HEAD.size
    coding = bytes(body[start:start + coding_size]).decode("ascii") or None
    return (status, bytes(body[start + coding_size:]), None if json_length < 0 else json_length,
            coding)


class FrameProtocol(asyncio.Protocol):
    """Reads frames off a stream socket and hands each to ``on_frame(kind, exchange, body)``
    on the event loop; ``on_lost()`` once the connection ends."""

    def __init__(self, on_frame: OnFrame, on_lost: Callable[[], object]) -> None:
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._received = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        received = self._received
        if not received and len(data) >= HEAD_SIZE:
            # The usual read: exactly one whole frame, handed on from ``data`` itself (no
            # copy into the buffer; ``data`` does not change, so the view needs no release).
            size, kind, exchange = _HEAD.unpack_from(data, 0)
            if len(data) == size + 4 and 5 <= size <= MAX_FRAME_BYTES:
                self.on_frame(kind, exchange, memoryview(data)[HEAD_SIZE:])
                return
        received += data
        position, available = 0, len(received)
        view = memoryview(received)
        try:
            while available - position >= HEAD_SIZE:
                size, kind, exchange = _HEAD.unpack_from(received, position)
                if size > MAX_FRAME_BYTES or size < 5:
                    assert self.transport is not None
                    self.transport.close()  # a broken peer: nothing it sends can be trusted
                    return
                end = position + 4 + size
                if end > available:
                    break
                self.on_frame(kind, exchange, view[position + HEAD_SIZE:end])
                position = end
        finally:
            view.release()
        if position:
            del received[:position]

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()

    def write(self, data: bytes) -> bool:
        """Send a frame; False when the connection is gone."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(data)
        return True


# --- gRPC calls ---------------------------------------------------------------------------

_CALL_HEAD = struct.Struct("<BdH")


def call_frame(exchange: int, method: str, streaming: bool, seconds_left: float | None,
               metadata: list[list[Any]], request: bytes = b"", kind: int = CALL) -> bytes:
    """A ``CALL`` frame (or, ``kind`` GRPC_INFER, a ``ModelInfer`` for the engine's loop)."""
    name = method.encode("utf-8")
    meta = orjson.dumps(metadata)
    return frame(kind, exchange, _CALL_HEAD.pack(streaming, -1.0 if seconds_left is None
                                                 else seconds_left, len(name)),
                 name, _SIZE.pack(len(meta)), meta, request)


def read_call(body: memoryview) -> tuple[str, bool, float | None, list[list[Any]], bytes]:
    """(method, streaming, seconds left, metadata, request bytes) of a CALL frame."""
    streaming, seconds_left, name_size = _CALL_HEAD.unpack_from(body, 0)
    position = _CALL_HEAD.size
    method = bytes(body[position:position + name_size]).decode("utf-8")
    position += name_size
    (meta_size,) = _SIZE.unpack_from(body, position)
    position += 4
    metadata = orjson.loads(body[position:position + meta_size])
    return (method, bool(streaming), None if seconds_left < 0 else seconds_left, metadata,
            bytes(body[position + meta_size:]))


_GRPC_ANSWER_HEAD = struct.Struct("<BBI")


def grpc_answer_frame(exchange: int, code: int, details: str, message: bytes | None,
                      uncompressed: bool = False) -> bytes:
    text = details.encode("utf-8")
    return frame(GRPC_ANSWER, exchange, _GRPC_ANSWER_HEAD.pack(code, uncompressed, len(text)),
                 text, message or b"")


def read_grpc_answer(body: memoryview) -> tuple[int, str, bytes | None, bool]:
    """(code, details, response message or None, uncompressed) of a GRPC_ANSWER frame."""
    code, uncompressed, size = _GRPC_ANSWER_HEAD.unpack_from(body, 0)
    start = _GRPC_ANSWER_HEAD.size
    details = bytes(body[start:start + size]).decode("utf-8")
    return code, details, (bytes(body[start + size:]) if code == 0 else None), bool(uncompressed)


def metadata_of(metadata: Sequence[tuple[str, Any]]) -> list[list[Any]]:
    """gRPC metadata as a CALL frame carries it (binary values in base64)."""
    return [[key, base64.b64encode(value).decode(), True] if isinstance(value, bytes)
            else [key, value, False] for key, value in metadata]


def metadata_from(metadata: list[list[Any]]) -> tuple[tuple[str, Any], ...]:
    """A CALL frame's metadata as grpc's ``invocation_metadata()`` gives it."""
    return tuple((key, base64.b64decode(value) if binary else value)
                 for key, value, binary in metadata)


_STREAM_END_HEAD = struct.Struct("<BB")


def stream_end_frame(exchange: int, code: int, details: str, now: bool = False) -> bytes:
    """The end of a stream run on the engine's loop: its status, and whether the frontend
    drops what it still holds of the stream's responses (``now``)."""
    return frame(STREAM_END, exchange, _STREAM_END_HEAD.pack(code, now),
                 details.encode("utf-8"))


def read_stream_end(body: memoryview) -> tuple[int, bool, str]:
    """(code, now, details) of a STREAM_END frame."""
    code, now = _STREAM_END_HEAD.unpack_from(body, 0)
    return code, bool(now), bytes(body[_STREAM_END_HEAD.size:]).decode("utf-8")


def message_frame(exchange: int, data: bytes, uncompressed: bool = False) -> bytes:
    return frame(MESSAGE, exchange, _MORE.pack(uncompressed), data)


def status_frame(exchange: int, code: int, details: str = "") -> bytes:
    return frame(STATUS, exchange, _MORE.pack(code), details.encode("utf-8"))


class BlockingLink:
    """Frames over a blocking stream socket, for threads: ``send`` from any thread, and a
    reader thread that hands each frame to ``on_frame(kind, exchange, body)`` (a copy of
    its own) and calls ``on_lost()`` when the connection ends."""

    def __init__(self, sock: socket.socket, on_frame: OnFrame, on_lost: Callable[[], object],
                 name: str) -> None:
        self.sock = sock
        self.on_frame = on_frame
        self.on_lost = on_lost
        self._send_lock = threading.Lock()
        self.closed = False
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)

    def start(self) -> None:
        self._reader.start()

    def send(self, data: bytes) -> bool:
        """Send a frame; False when the connection is gone."""
        try:
            with self._send_lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def _read(self) -> None:
        stream = self.sock.makefile("rb", buffering=256 * 1024)
        try:
            while True:
                head = stream.read(HEAD_SIZE)
                if len(head) < HEAD_SIZE:
                    break
                size, kind, exchange = _HEAD.unpack(head)
                if size > MAX_FRAME_BYTES or size < 5:
                    break
                body = stream.read(size - 5)
                if len(body) < size - 5:
                    break
                self.on_frame(kind, exchange, memoryview(body))
        except OSError:
            pass
        finally:
            self.closed = True
            self.on_lost()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
