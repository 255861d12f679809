"""Reading request bodies under the size limit, and content encodings both ways.

The limit (Triton's ``--http-max-input-size``) is checked against Content-Length before a
byte is buffered, while a chunked body streams in, and again after decompression, so a small
compressed body cannot expand past it.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Awaitable, Callable

from naiad.errors import InferenceServerError, Status, invalid_arg

KIB = 1024

Receive = Callable[[], Awaitable[dict]]


def too_large(limit: int, what: str) -> InferenceServerError:
    return InferenceServerError(
        f"{what} exceeds the request size limit of {limit} bytes; raise it with "
        f"--http-max-input-size", Status.RESOURCE_EXHAUSTED)


async def read_body(receive: Receive, content_length: int | None, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes before buffering them."""
    if content_length is not None and content_length > limit:
        raise too_large(limit, f"the request body ({content_length} bytes)")
    message = await receive()
    if message["type"] == "http.disconnect":
        raise InferenceServerError("the client disconnected", Status.CANCELLED)
    body = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise too_large(limit, "the request body")
        return body  # type: ignore[no-any-return]
    chunks = [body]
    size = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InferenceServerError("the client disconnected", Status.CANCELLED)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit, "the request body")
        chunks.append(chunk)
    return b"".join(chunks)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding`` (gzip or deflate), stopping at ``limit`` output bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        raise invalid_arg(f"unsupported Content-Encoding '{encoding}': use gzip or deflate")
    parts: list[bytes] = []
    size = 0
    data = body
    try:
        while True:
            out = decoder.decompress(data, limit + 1 - size)
            size += len(out)
            parts.append(out)
            if size > limit or decoder.unconsumed_tail:
                raise too_large(limit, f"the decompressed request body ({encoding})")
            if not decoder.eof:
                raise invalid_arg(f"the request body is truncated {encoding} data "
                                  f"(no end of stream)")
            data = decoder.unused_data
            if not data:
                return b"".join(parts)
            if encoding == "deflate":
                raise invalid_arg(f"the request body has {len(data)} bytes after the end of "
                                  f"the deflate stream")
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next gzip member
    except zlib.error as exc:
        raise invalid_arg(f"the request body is not valid {encoding} data: {exc}") from None


def pick_encoding(accept: str) -> str | None:
    """The response encoding to use for an ``Accept-Encoding`` header (gzip or deflate)."""
    accept = accept.lower()
    if "gzip" in accept:
        return "gzip"
    if "deflate" in accept:
        return "deflate"
    return None


def compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6)
    return zlib.compress(body)
