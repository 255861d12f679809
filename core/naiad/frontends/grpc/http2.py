"""HTTP/2 as gRPC uses it, for naiad's own gRPC server (:mod:`.connection`): frame headers,
settings, header blocks and gRPC's message prefix and status trailers (RFC 9113, RFC 7541,
grpc's PROTOCOL-HTTP2.md).

Header blocks are decoded by the ``hpack`` package. A gRPC client sends the same block for
every call of a method once its headers are in the dynamic table (indexed fields only), so
:class:`HeaderDecoder` remembers what a block decoded to for as long as the table does not
change: a repeated call costs a dictionary lookup instead of a decode. Blocks naiad sends
never touch the client's table (literal fields without indexing), so they are built once.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 section 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
# Flags.
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# Settings (section 6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)
# Error codes (section 7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, \
    STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, \
    CONNECT_ERROR, ENHANCE_YOUR_CALM = range(12)

DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384
MAX_WINDOW = 2**31 - 1
FRAME_HEADER = struct.Struct(">HBBBL")  # length (24 bits: 16 + 8), type, flags, stream
_SETTING = struct.Struct(">HL")
_U32 = struct.Struct(">L")
GRPC_PREFIX = struct.Struct(">BL")  # compressed flag, message length


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: its 9-byte header and ``payload``."""
    length = len(payload)
    return FRAME_HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream) + payload


def settings_frame(settings: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value)
                                           for key, value in settings.items()))


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    return [_SETTING.unpack_from(payload, offset) for offset in range(0, len(payload), 6)]


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, _U32.pack(increment))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, _U32.pack(code))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _U32.pack(last_stream) + _U32.pack(code) + debug)


def read_u32(payload: bytes | memoryview) -> int:
    return _U32.unpack_from(payload)[0] & 0x7FFFFFFF


def unpadded(flags: int, payload: bytes, priority: bool = False) -> bytes:
    """A DATA or HEADERS payload without its padding (and priority fields); ValueError
    when the padding is longer than the frame."""
    start = 0
    end = len(payload)
    if flags & PADDED:
        if not payload:
            raise ValueError("a padded frame without its pad length")
        start = 1
        end -= payload[0]
    if priority:
        start += 5
    if end < start:
        raise ValueError("the frame's padding is longer than the frame")
    return payload[start:end]


# --- header blocks ------------------------------------------------------------------------

def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 section 5.1) in a first byte whose high bits are ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing, new name, no Huffman coding."""
    return (b"\x00" + _integer(len(name), 7, 0) + name + _integer(len(value), 7, 0) + value)


def table_size_update(size: int) -> bytes:
    """A dynamic table size update, which a header block starts with after the peer
    lowered SETTINGS_HEADER_TABLE_SIZE (RFC 7541 section 4.2)."""
    return _integer(size, 5, 0x20)


def header_block(headers: list[tuple[bytes, bytes]]) -> bytes:
    """A header block that leaves the peer's dynamic table as it is (``:status: 200`` is
    static entry 8)."""
    parts = []
    for name, value in headers:
        parts.append(b"\x88" if (name, value) == (b":status", b"200") else _literal(name, value))
    return b"".join(parts)


class HeaderDecoder:
    """An HPACK decoder that remembers blocks which left the dynamic table unchanged.

    ``max_size`` bounds a block's decoded headers as HTTP/2 counts them (name, value and
    32 bytes each); a larger block raises :class:`HeaderListTooLarge`. A block that does not
    decode raises :class:`BadHeaderBlock` (a COMPRESSION_ERROR: the connection must end).
    """

    _MAX_REMEMBERED = 256

    def __init__(self, max_size: int) -> None:
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = max_size
        self._remembered: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        headers = self._remembered.get(block)
        if headers is not None:
            return headers
        table = self._decoder.header_table
        before = (table.maxsize, len(table.dynamic_entries),
                  table.dynamic_entries[0] if table.dynamic_entries else None)
        try:
            headers = [(bytes(name), bytes(value))
                       for name, value in self._decoder.decode(block, raw=True)]
        except hpack.OversizedHeaderListError as exc:
            raise HeaderListTooLarge(str(exc)) from None
        except hpack.HPACKError as exc:
            raise BadHeaderBlock(str(exc)) from None
        after = (table.maxsize, len(table.dynamic_entries),
                 table.dynamic_entries[0] if table.dynamic_entries else None)
        if after[0] != before[0] or after[1] != before[1] or after[2] is not before[2]:
            self._remembered.clear()  # the same indices now name other headers
        else:
            if len(self._remembered) >= self._MAX_REMEMBERED:
                self._remembered.clear()
            self._remembered[block] = headers
        return headers


class HeaderListTooLarge(Exception):
    """A header block larger than the server's limit (``--grpc-max-header-size``)."""


class BadHeaderBlock(Exception):
    """A header block HPACK cannot decode."""


# --- gRPC over HTTP/2 ---------------------------------------------------------------------

_RESPONSE_HEADERS = header_block([(b":status", b"200"),
                                  (b"content-type", b"application/grpc")])
#: ``grpc-status`` 0 alone: the trailers of a call that succeeded.
OK_TRAILERS = header_block([(b"grpc-status", b"0")])
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Bytes sent as they are in grpc-message: printable ASCII but '%' (PROTOCOL-HTTP2.md).
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


_COMPRESSED_HEADERS = {encoding: header_block([(b":status", b"200"),
                                               (b"content-type", b"application/grpc"),
                                               (b"grpc-encoding", encoding)])
                       for encoding in (b"gzip", b"deflate")}


def response_headers(encoding: bytes | None = None) -> bytes:
    """The header block that opens a response (with ``grpc-encoding`` when compressed:
    gzip or deflate)."""
    if encoding is None:
        return _RESPONSE_HEADERS
    return _COMPRESSED_HEADERS[encoding]


def status_trailers(code: int, message: str, headers_sent: bool) -> bytes:
    """The header block that ends a call with ``code`` and ``message``; a call that sent no
    response headers ends "Trailers-Only" (status and content type in the same block)."""
    if code == 0 and headers_sent and not message:  # nearly every call: built once
        return OK_TRAILERS
    fields = [] if headers_sent else [(b":status", b"200"),
                                      (b"content-type", b"application/grpc")]
    fields.append((b"grpc-status", str(code).encode()))
    if message:
        fields.append((b"grpc-message", quote(message, safe=_SAFE).encode("ascii")))
    return header_block(fields)


def timeout_seconds(value: bytes) -> float | None:
    """A ``grpc-timeout`` header's value in seconds (``1S``, ``250m``...); None if invalid."""
    text = value.decode("latin-1")
    unit = _TIMEOUT_UNITS.get(text[-1:])
    digits = text[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


def message_text(value: bytes) -> str:
    """A percent-encoded ``grpc-message`` as text."""
    return unquote(value.decode("latin-1"))


# Headers that are gRPC's own, not the call's metadata (grpc's invocation_metadata()
# leaves them out too).
_RESERVED = frozenset({b"te", b"content-type", b"grpc-timeout", b"grpc-encoding",
                       b"grpc-accept-encoding", b"grpc-message-type"})
#: zlib's window bits for each message encoding a client may use.
WBITS = {b"gzip": 31, b"deflate": 15}


class CallHeaders(NamedTuple):
    """What a call's request headers say."""

    path: str
    timeout_s: float | None  # grpc-timeout; None: no deadline
    encoding: bytes  # grpc-encoding (b"" or b"identity": none)
    accept: bytes  # grpc-accept-encoding
    metadata: tuple[tuple[str, Any], ...]  # as grpc's invocation_metadata() gives it


def call_headers(headers: list[tuple[bytes, bytes]]) -> CallHeaders:
    """The request headers of a call; ValueError naming a ``-bin`` entry that is not
    base64."""
    path = b""
    timeout = None
    encoding = accept = b""
    metadata: list[tuple[str, Any]] = []
    for name, value in headers:
        if name[:1] == b":":
            if name == b":path":
                path = value
        elif name == b"grpc-timeout":
            timeout = timeout_seconds(value)
        elif name == b"grpc-encoding":
            encoding = value
        elif name == b"grpc-accept-encoding":
            accept = value
        elif name not in _RESERVED:
            key = name.decode("latin-1")
            if not key.endswith("-bin"):
                metadata.append((key, value.decode("latin-1")))
                continue
            try:
                metadata.append((key, base64.b64decode(value + b"==")))
            except binascii.Error:
                raise ValueError(f"the call's metadata '{key}' is not base64") from None
    return CallHeaders(path.decode("latin-1"), timeout, encoding, accept, tuple(metadata))


def inflate(message: bytes, encoding: bytes, limit: int) -> bytes:
    """A compressed message's bytes: at most ``limit + 1`` of them (the caller refuses
    more), so a small message cannot inflate past the limit in memory. zlib.error when
    they do not decompress."""
    return zlib.decompressobj(WBITS[encoding]).decompress(message, limit + 1)
