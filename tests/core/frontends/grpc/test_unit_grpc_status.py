"""gRPC status messages are bounded so that every client receives them (the grpc-message
trailer under grpc's default metadata limit): naiad.frontends.grpc.status."""

from __future__ import annotations

import urllib.parse

import pytest

from naiad.frontends.grpc.status import STATUS_MESSAGE_MAX_BYTES, bounded_message


def trailer_size(message: str) -> int:
    """The bytes of ``message`` in grpc-message: printable ASCII but % as is, else %XX."""
    return len(urllib.parse.quote(message.encode(), safe=bytes(
        b for b in range(0x20, 0x7F) if b != 0x25)))


def test_a_short_message_is_unchanged():
    message = "Request for unknown model: 'add_sub' is not found"
    assert bounded_message(message) is message


@pytest.mark.parametrize("name", ["m" * 10000, "é" * 3000, "%" * 5000, "\u2603" * 2000,
                                  "m" * 1400 + "\U0001F600" * 300])
def test_a_long_message_keeps_its_ends_and_fits(name):
    message = f"Request for unknown model: '{name}' is not found"
    assert trailer_size(message) > STATUS_MESSAGE_MAX_BYTES  # the case at hand
    bounded = bounded_message(message)
    assert trailer_size(bounded) <= STATUS_MESSAGE_MAX_BYTES
    assert bounded.startswith("Request for unknown model: '")
    assert bounded.endswith("' is not found")
    head, _, rest = bounded.partition(" [... ")
    count = int(rest.split(" ", 1)[0])
    tail = rest.split(" ...] ", 1)[1]
    assert len(head) + count + len(tail) == len(message)
    assert message.startswith(head) and message.endswith(tail)
    # the bound is used, not wasted: each end takes at least a third of it
    assert trailer_size(head) > STATUS_MESSAGE_MAX_BYTES // 3 - 12


def test_a_message_at_the_bound_is_kept_whole():
    message = "x" * STATUS_MESSAGE_MAX_BYTES
    assert bounded_message(message) == message
    assert bounded_message(message + "y") != message + "y"


@pytest.mark.parametrize("code, message, headers_sent", [
    (0, "", True), (0, "", False), (0, "fine", True), (5, "not found", True),
    (5, "", False)])
def test_status_trailers_decode_to_the_status(code, message, headers_sent):
    """What ends a call, the usual OK block (built once) among them, decodes to its status,
    message and, for a call that sent no headers, the response headers."""
    import hpack

    from naiad.frontends.grpc import http2

    decoded = dict((bytes(k), bytes(v)) for k, v in hpack.Decoder().decode(
        http2.status_trailers(code, message, headers_sent), raw=True))
    expected = {b"grpc-status": str(code).encode()}
    if message:
        expected[b"grpc-message"] = message.encode()
    if not headers_sent:
        expected.update({b":status": b"200", b"content-type": b"application/grpc"})
    assert decoded == expected
