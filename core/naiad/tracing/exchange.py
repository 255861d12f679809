"""The frontend's part of a traced call: protocol timestamps and the W3C trace context.

Only while tracing is on does a frontend wrap a call in an :class:`Exchange`: HTTP's
``POST .../infer`` (:func:`traced_http_call`, which wraps the ASGI ``receive`` and
``send`` to see the body end and the response go out) and gRPC's ``ModelInfer``
(:func:`grpc_exchange`). The exchange is the current one (a context variable) while the
frontend hands its request to the core, so the core's sampler finds it without a
parameter on the request path: if the request is traced, the exchange joins its family
(:meth:`Exchange.adopt`) and holds it open until the response is sent.

Timestamps: HTTP_RECV_START, HTTP_RECV_END, HTTP_SEND_START, HTTP_SEND_END; gRPC has no
wait for a request in naiad (the handler starts with it), so GRPC_WAITREAD_START and
GRPC_WAITREAD_END are both the handler's start, GRPC_SEND_START when the handler returns
the response and GRPC_SEND_END when gRPC reports the call over.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import grpc

#: The exchange of the call the current thread or task is handling (None: not traced).
CURRENT: ContextVar[Exchange | None] = ContextVar("naiad_trace_exchange", default=None)

# W3C trace context: version-trace_id-parent_id-flags, lower-case hex, ids not all zero.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-"
                          r"[0-9a-f]{2}$")
_CONTEXT_HEADERS = ("traceparent", "tracestate")


class TraceFamily(Protocol):
    """What an exchange needs of the traces of its request
    (:class:`naiad.tracing.trace.TraceFamily`, which refers back to the exchange)."""

    exchange: Exchange | None

    def hold(self) -> bool: ...

    def release(self) -> None: ...


class Exchange:
    """One call of a client, as its frontend handles it."""

    __slots__ = ("_headers", "_token", "family", "protocol", "timestamps")

    def __init__(self, protocol: str, headers: Iterable[tuple[Any, Any]]) -> None:
        self.protocol = protocol  # "HTTP" or "GRPC": the prefix of its timestamps
        self.timestamps: list[tuple[str, int]] = []
        self.family: TraceFamily | None = None
        self._headers = headers
        self._token: Token[Exchange | None] | None = None

    def mark(self, name: str) -> None:
        self.timestamps.append((f"{self.protocol}_{name}", time.perf_counter_ns()))

    def context_carrier(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``) of the call, when it has a valid one."""
        carrier = {}
        for key, value in self._headers:
            name = key.decode("latin-1") if isinstance(key, bytes) else key
            name = name.lower()
            if name in _CONTEXT_HEADERS:
                carrier[name] = (value.decode("latin-1") if isinstance(value, bytes)
                                 else str(value)).strip()
        if not _TRACEPARENT.match(carrier.get("traceparent", "")):
            return {}
        return carrier

    def adopt(self, family: TraceFamily) -> None:
        """The core traces this call's request: hold its family until the call ends."""
        family.hold()
        family.exchange = self
        self.family = family

    def enter(self) -> None:
        self._token = CURRENT.set(self)

    def leave(self) -> None:
        if self._token is not None:
            CURRENT.reset(self._token)
            self._token = None

    def end(self) -> None:
        """The call is over (response sent, or given up): let the family go."""
        family, self.family = self.family, None
        if family is not None:
            family.release()


async def traced_http_call(handler: Callable[..., Awaitable[None]], scope: dict,
                           receive: Callable[[], Awaitable[dict]],
                           send: Callable[[dict], Awaitable[None]], *args: Any) -> None:
    """Run the ASGI ``handler(scope, receive, send, *args)`` of one HTTP request with an
    exchange current, marking when the body was read and the response sent."""
    exchange = Exchange("HTTP", scope["headers"])
    exchange.mark("RECV_START")

    async def receiving() -> dict:
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            exchange.mark("RECV_END")
        return message

    async def sending(message: dict) -> None:
        if message["type"] == "http.response.start":
            exchange.mark("SEND_START")
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            exchange.mark("SEND_END")

    exchange.enter()
    try:
        await handler(scope, receiving, sending, *args)
    finally:
        exchange.leave()
        exchange.end()


def grpc_exchange(context: grpc.ServicerContext) -> Exchange:
    """Start the exchange of a unary gRPC call (current until :func:`grpc_handled`)."""
    exchange = Exchange("GRPC", context.invocation_metadata() or ())
    exchange.mark("WAITREAD_START")
    exchange.timestamps.append(("GRPC_WAITREAD_END", exchange.timestamps[-1][1]))
    exchange.enter()
    return exchange


def grpc_handled(exchange: Exchange, context: grpc.ServicerContext) -> None:
    """The handler returns its response: gRPC sends it, then reports the call over."""
    exchange.leave()
    if exchange.family is None:
        return
    exchange.mark("SEND_START")

    def sent() -> None:
        exchange.mark("SEND_END")
        exchange.end()

    if not context.add_callback(sent):  # the call is over already
        sent()
