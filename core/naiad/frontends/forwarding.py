"""Header forwarding: tritonserver's ``--http-header-forward-pattern`` and
``--grpc-header-forward-pattern``.

The headers of an inference request whose names match the pattern become string parameters
of that request, which a model reads with the other parameters (``request.parameters()`` in
a Python model). What tritonserver 2.51 does, observed, and naiad does the same:

- the pattern is searched for anywhere in the name (``my_h.*`` matches ``x-my_header``;
  anchor it, ``^...$``, for a whole-name match) and ignores case unless it starts with
  ``(?-i)``;
- every value is a string; a header that is also a parameter of the request body wins (the
  model reads the header's value); a repeated header gives its last value;
- only inference requests get them (HTTP ``.../infer``, gRPC ``ModelInfer`` and every
  request of a ``ModelStreamInfer`` stream, which all share the stream's metadata).

Two differences, both out of naiad's hands or on purpose: HTTP header names arrive lowercase
(ASGI servers lowercase them, so a ``(?-i)`` pattern must be lowercase to match over HTTP),
and a header named like a parameter naiad acts on (``sequence_id``, ``priority``,
``timeout``...) is not forwarded, so no header can change how a request is scheduled or
encoded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# RE2 turns case folding off with "(?-i)" for the rest of the pattern; Python's re accepts
# that only as a scoped group, so the leading form tritonserver documents is translated.
_CASE_SENSITIVE_PREFIX = "(?-i)"

# Request parameters naiad itself reads from a request (scheduling, sequences, the HTTP
# response encoding): a forwarded string must not replace them.
_CONTROL_PARAMETERS = frozenset({
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
    "binary_data_output",
})


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The compiled forward pattern, None when it is empty (nothing is forwarded);
    re.error when it is not a regular expression."""
    if not pattern:
        return None
    if pattern.startswith(_CASE_SENSITIVE_PREFIX):
        return re.compile(pattern[len(_CASE_SENSITIVE_PREFIX):])
    return re.compile(pattern, re.IGNORECASE)


class HeaderForwarder:
    """Picks the headers to forward out of one request's headers."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.search = pattern.search

    def from_http(self, headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
        """ASGI headers -> ``{name: value}`` of those to forward."""
        search = self.search
        forwarded = {}
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1")
            if search(name) and name not in _CONTROL_PARAMETERS:
                # A parameter is text; header values are bytes, UTF-8 when not ASCII.
                forwarded[name] = raw_value.decode("utf-8", "replace")
        return forwarded

    def from_grpc(self, metadata: Iterable[tuple[str, str | bytes]]) -> dict[str, str]:
        """gRPC invocation metadata -> ``{key: value}`` of the entries to forward; binary
        (``-bin``) entries are skipped: a parameter carries text."""
        search = self.search
        return {key: value for key, value in metadata
                if isinstance(value, str) and search(key) and key not in _CONTROL_PARAMETERS}


def header_forwarder(pattern: str) -> HeaderForwarder | None:
    """The forwarder for a ``--*-header-forward-pattern`` value, None when it is empty."""
    compiled = compile_pattern(pattern)
    return None if compiled is None else HeaderForwarder(compiled)


__all__ = ["HeaderForwarder", "compile_pattern", "header_forwarder"]
