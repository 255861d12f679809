"""Unit tests of naiad.frontends.http.body: bounded body reading and content encodings."""

from __future__ import annotations

import gzip
import zlib

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.frontends.http.body import compress, decompress, pick_encoding, read_body

LIMIT = 100


class FakeReceive:
    """An ASGI ``receive`` that hands out the given messages and counts the calls."""

    def __init__(self, *messages: dict) -> None:
        self.messages = list(messages)
        self.calls = 0

    async def __call__(self) -> dict:
        self.calls += 1
        return self.messages.pop(0)


def chunk(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def too_large(info: pytest.ExceptionInfo) -> None:
    assert info.value.status is Status.RESOURCE_EXHAUSTED
    assert f"limit of {LIMIT} bytes" in info.value.message
    assert "--http-max-input-size" in info.value.message


async def test_single_message_body():
    receive = FakeReceive(chunk(b"hello", False))
    assert await read_body(receive, 5, LIMIT) == b"hello"
    assert receive.calls == 1


async def test_message_without_body_key_is_empty():
    assert await read_body(FakeReceive({"type": "http.request"}), None, LIMIT) == b""


async def test_chunked_body_is_joined_in_order():
    receive = FakeReceive(chunk(b"ab", True), chunk(b"", True), chunk(b"cd", True),
                          chunk(b"e", False))
    assert await read_body(receive, None, LIMIT) == b"abcde"
    assert receive.calls == 4


async def test_body_of_exactly_the_limit_is_accepted():
    body = b"x" * LIMIT
    assert await read_body(FakeReceive(chunk(body, False)), LIMIT, LIMIT) == body
    receive = FakeReceive(chunk(body[:60], True), chunk(body[60:], False))
    assert await read_body(receive, None, LIMIT) == body


async def test_content_length_over_limit_is_refused_before_reading():
    receive = FakeReceive(chunk(b"x", False))
    with pytest.raises(InferenceServerError) as info:
        await read_body(receive, LIMIT + 1, LIMIT)
    too_large(info)
    assert f"({LIMIT + 1} bytes)" in info.value.message
    assert receive.calls == 0


async def test_single_message_over_limit_despite_small_content_length():
    receive = FakeReceive(chunk(b"x" * (LIMIT + 1), False))
    with pytest.raises(InferenceServerError) as info:
        await read_body(receive, 10, LIMIT)
    too_large(info)


async def test_chunked_body_over_limit_stops_reading():
    receive = FakeReceive(*[chunk(b"x" * 40, True) for _ in range(10)], chunk(b"", False))
    with pytest.raises(InferenceServerError) as info:
        await read_body(receive, None, LIMIT)
    too_large(info)
    assert receive.calls == 3  # 40 + 40 + 40 > 100: refused at the third chunk


async def test_disconnect_while_streaming_is_cancelled():
    receive = FakeReceive(chunk(b"ab", True), {"type": "http.disconnect"})
    with pytest.raises(InferenceServerError) as info:
        await read_body(receive, None, LIMIT)
    assert info.value.status is Status.CANCELLED
    assert "disconnected" in info.value.message


async def test_disconnect_before_any_body_is_cancelled():
    with pytest.raises(InferenceServerError) as info:
        await read_body(FakeReceive({"type": "http.disconnect"}), None, LIMIT)
    assert info.value.status is Status.CANCELLED


# --- decompress -----------------------------------------------------------------------------

PAYLOAD = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1.0]}]}'


@pytest.mark.parametrize("encoding", ["", "identity", " Identity "])
def test_identity_is_returned_as_is(encoding):
    assert decompress(PAYLOAD, encoding, LIMIT) is PAYLOAD


@pytest.mark.parametrize(("encoding", "packed"), [
    ("gzip", gzip.compress(PAYLOAD)), ("deflate", zlib.compress(PAYLOAD)),
    (" GZIP ", gzip.compress(PAYLOAD))], ids=["gzip", "deflate", "spaced-GZIP"])
def test_gzip_and_deflate_are_undone(encoding, packed):
    assert decompress(packed, encoding, LIMIT) == PAYLOAD


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compress_and_decompress_round_trip(encoding):
    assert decompress(compress(PAYLOAD, encoding), encoding, LIMIT) == PAYLOAD


def test_decompressed_size_of_exactly_the_limit_is_accepted():
    body = b"y" * LIMIT
    assert decompress(gzip.compress(body), "gzip", LIMIT) == body


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compression_bomb_is_refused_at_the_limit(encoding):
    bomb = compress(b"\x00" * (10 * 1024 * 1024), encoding)
    assert len(bomb) < 20 * 1024
    with pytest.raises(InferenceServerError) as info:
        decompress(bomb, encoding, LIMIT)
    too_large(info)
    assert encoding in info.value.message


def test_one_byte_over_the_limit_after_decompression_is_refused():
    with pytest.raises(InferenceServerError) as info:
        decompress(gzip.compress(b"z" * (LIMIT + 1)), "gzip", LIMIT)
    too_large(info)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_garbage_is_invalid_arg_naming_the_encoding(encoding):
    with pytest.raises(InferenceServerError) as info:
        decompress(b"this is not compressed at all", encoding, LIMIT)
    assert info.value.status is Status.INVALID_ARG
    assert f"not valid {encoding} data" in info.value.message


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_truncated_stream_is_invalid_arg(encoding):
    packed = compress(PAYLOAD * 2, encoding)
    with pytest.raises(InferenceServerError) as info:
        decompress(packed[: len(packed) // 2], encoding, 10 * LIMIT)
    assert info.value.status is Status.INVALID_ARG


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_empty_body_is_not_a_compressed_stream(encoding):
    with pytest.raises(InferenceServerError) as info:
        decompress(b"", encoding, LIMIT)
    assert info.value.status is Status.INVALID_ARG


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_trailing_bytes_after_the_stream_are_invalid_arg(encoding):
    with pytest.raises(InferenceServerError) as info:
        decompress(compress(PAYLOAD, encoding) + b"garbage", encoding, LIMIT)
    assert info.value.status is Status.INVALID_ARG


def test_multi_member_gzip_is_decoded_whole():
    packed = gzip.compress(PAYLOAD[:10]) + gzip.compress(PAYLOAD[10:])
    assert gzip.decompress(packed) == PAYLOAD
    assert decompress(packed, "gzip", LIMIT) == PAYLOAD


@pytest.mark.parametrize("encoding", ["br", "compress", "zstd"])
def test_unsupported_encoding_names_it(encoding):
    with pytest.raises(InferenceServerError) as info:
        decompress(PAYLOAD, encoding, LIMIT)
    assert info.value.status is Status.INVALID_ARG
    assert f"'{encoding}'" in info.value.message
    assert "gzip or deflate" in info.value.message


# --- pick_encoding --------------------------------------------------------------------------


@pytest.mark.parametrize(("accept", "expected"), [
    ("gzip", "gzip"),
    ("deflate", "deflate"),
    ("gzip, deflate, br", "gzip"),
    ("deflate, gzip", "gzip"),
    ("GZip", "gzip"),
    ("br", None),
    ("identity", None),
    ("", None),
])
def test_pick_encoding_prefers_gzip_then_deflate(accept, expected):
    assert pick_encoding(accept) == expected


def test_compress_gzip_is_readable_by_gzip_module():
    assert gzip.decompress(compress(PAYLOAD, "gzip")) == PAYLOAD
    assert zlib.decompress(compress(PAYLOAD, "deflate")) == PAYLOAD
