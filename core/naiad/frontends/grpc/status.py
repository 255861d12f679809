"""Ending a call with an error status whose message every client can receive.

A gRPC status message travels in the ``grpc-message`` trailer, percent-encoded (every byte
outside printable ASCII, and ``%``, takes three). A client refuses trailers larger than its
metadata limit: grpc's default is 8 KiB "soft" (above it, a growing share of calls is
refused at random) and 16 KiB "hard" (always refused), so the call ends RESOURCE_EXHAUSTED
"received metadata size exceeds soft limit" instead of with naiad's answer. A message that
echoes what the client sent (a 10,000-character model name) crossed it on one call in four.
So every message naiad sends as a status is bounded, its middle left out, the start (what
went wrong) and the end (what was expected) kept.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

KIB = 1024
#: The most bytes a status message takes in the ``grpc-message`` trailer, percent-encoded:
#: half of grpc's default metadata soft limit leaves room for the other trailers.
STATUS_MESSAGE_MAX_BYTES = 4 * KIB
# The bytes grpc sends as they are (RFC 3986 unreserved and the like: printable ASCII but %).
_PLAIN = bytes(b for b in range(0x20, 0x7F) if b != 0x25)
# The most a character can take encoded: 4 UTF-8 bytes, each as %XX.
_MAX_CHARACTER_BYTES = 12
_OMISSION = " [... {} characters left out ...] "


def _encoded_size(text: str) -> int:
    data = text.encode("utf-8", "replace")
    return len(data) + 2 * len(data.translate(None, _PLAIN))


def bounded_message(message: str, limit: int = STATUS_MESSAGE_MAX_BYTES) -> str:
    """``message``, or its start and end with the middle left out (said so), such that it
    takes at most ``limit`` bytes in the ``grpc-message`` trailer."""
    if len(message) * _MAX_CHARACTER_BYTES <= limit or _encoded_size(message) <= limit:
        return message
    # Each end gets half of what the omission notice leaves (its count has <= 20 digits).
    budget = (limit - len(_OMISSION) - 20) // 2
    head = _fitting(message, budget)
    tail = _fitting(message[::-1], budget)[::-1]
    left_out = len(message) - len(head) - len(tail)
    return head + _OMISSION.format(left_out) + tail


def _fitting(text: str, budget: int) -> str:
    """The longest start of ``text`` that takes at most ``budget`` bytes encoded."""
    used = 0
    for index, character in enumerate(text):
        used += _encoded_size(character)
        if used > budget:
            return text[:index]
    return text


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """``context.abort`` with the message bounded (:func:`bounded_message`)."""
    context.abort(code, bounded_message(message))
    raise AssertionError("unreachable: context.abort raises")
