"""Unit tests of naiad.frontends.http.protocol: which requests naiad's protocol answers itself
(and which go to the ASGI application), the order of pipelined answers, a disconnect
withdrawing a held request, and shutdown; driven read by read through a recording transport
with a stand-in infer route whose futures the test completes."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from test_unit_http_limits import Transport
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from naiad.frontends.http.infer import Answer, InferRoute
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.protocol import NaiadHttpProtocol, _Exchange
from naiad.futures import LoopWaiter

LIMITS = HTTPLimits(max_header_size=4096, max_header_count=20, keepalive_timeout=60,
                    header_timeout=60, body_timeout=60)


class Route(InferRoute):
    """Stands in for the server's InferRoute (its steps replaced, its exchange kept): each
    submitted request's future waits for the test."""

    def __init__(self, loop: asyncio.AbstractEventLoop, holds_requests: bool = False) -> None:
        self.server = SimpleNamespace(tracer=None, infer_on_loop=self._infer_on_loop)
        self.limit = 1024
        self.loop = loop
        self.model = SimpleNamespace(name="m", scheduler=SimpleNamespace(
            holds_requests=holds_requests))
        self.submitted: list[tuple[bytes, Future]] = []

    def find(self, model_name: str, version: str) -> SimpleNamespace:
        return self.model

    def decode(self, model, heads, body: bytes, headers) -> bytes:
        return body

    def _infer_on_loop(self, model, request: bytes, answer) -> Future:
        future: Future = Future()
        self.submitted.append((request, future))
        return future

    def waiter(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopWaiter:
        return LoopWaiter(loop or self.loop)

    def outcome(self, model, request: bytes, future: Future, accept: str) -> Answer:
        return Answer(200, b"answer to " + request)


class Connection:
    def __init__(self, loop: asyncio.AbstractEventLoop, route: Route | None,
                 protocol_class: type = NaiadHttpProtocol) -> None:
        self.loop = loop
        self.app_paths: list[str] = []
        self.app_scopes: list[dict] = []

        async def app(scope: dict, receive, send) -> None:
            while (await receive()).get("more_body"):
                pass
            self.app_paths.append(scope["path"])
            self.app_scopes.append(scope)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"3")]})
            await send({"type": "http.response.body", "body": b"app"})

        self.transport = Transport()
        extra = {} if protocol_class is HttpToolsProtocol else {"limits": LIMITS, "infer": route}
        self.protocol = protocol_class(
            config=Config(app, lifespan="off", log_level="critical"),
            server_state=ServerState(), app_state={"k": "v"}, _loop=loop, **extra)
        self.protocol.connection_made(self.transport)

    def feed(self, *reads: bytes) -> None:
        for data in reads:
            self.protocol.data_received(data)
            self.settle()

    def settle(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0.01))  # let the application run

    def bodies(self) -> list[bytes]:
        return re.findall(rb"\r\n\r\n(answer to [a-z]*|app)", self.transport.written)


def infer(body: bytes = b"x", path: str = "/v2/models/m/infer", extra: bytes = b"",
          version: bytes = b"1.1") -> bytes:
    return (b"POST %s HTTP/%s\r\nHost: h\r\nContent-Length: %d\r\n%s\r\n%s"
            % (path.encode(), version, len(body), extra, body))


def test_a_plain_inference_is_answered_without_the_application(loop):
    route = Route(loop)
    connection = Connection(loop, route)
    connection.feed(infer(b"one")[:40], infer(b"one")[40:])
    assert isinstance(connection.protocol.cycle, _Exchange)
    route.submitted[0][1].set_result(None)
    connection.settle()
    assert connection.bodies() == [b"answer to one"] and connection.app_paths == []
    assert b"content-type: application/json" in connection.transport.written
    assert not connection.transport.closed


@pytest.mark.parametrize("request_bytes", [
    infer(path="/v2/models/m/infer?q=1"),
    infer(path="/v2/models/m%20n/infer"),
    infer(path="/v2/models/m/ready"),
    infer(version=b"1.0"),
    infer(extra=b"Expect: 100-continue\r\n"),
    infer(b"x" * 2000),  # over the route's limit: the application answers the 413
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"1\r\nx\r\n0\r\n\r\n",
], ids=["query", "escape", "other path", "http/1.0", "expect", "too large", "chunked"])
def test_other_requests_go_to_the_application(loop, request_bytes):
    route = Route(loop)
    connection = Connection(loop, route)
    connection.feed(request_bytes)
    assert route.submitted == [] and len(connection.app_paths) == 1


def test_the_application_gets_the_scope_uvicorn_makes(loop):
    """naiad's protocol makes the ASGI scope only for a request that takes the application's
    path (a plain inference does not need one): the application gets what uvicorn's own
    protocol gives it, after a plain inference on the same connection too."""
    other = (b"GET /v2/models/m/ready?x=1 HTTP/1.1\r\nHost: h\r\nX-One: 1\r\n"
             b"Expect: 100-continue\r\nContent-Length: 0\r\n\r\n")
    uvicorn_own = Connection(loop, None, HttpToolsProtocol)
    uvicorn_own.feed(other)
    route = Route(loop)
    naiad = Connection(loop, route)
    naiad.feed(infer(b"a"))
    route.submitted[0][1].set_result(None)
    naiad.settle()
    naiad.feed(other)
    assert naiad.bodies() == [b"answer to a", b"app"]
    [expected], [got] = uvicorn_own.app_scopes, naiad.app_scopes
    assert got == expected
    assert got["headers"] is naiad.protocol.headers and got["state"] == {"k": "v"}
    assert (b"100 Continue" in naiad.transport.written) == (
        b"100 Continue" in uvicorn_own.transport.written)


def test_keep_alive_after_plain_answers(loop):
    """After a plain answer the connection closes once idle for uvicorn's keep-alive
    timeout (naiad's protocol keeps one timer per connection, not one per answer): counted
    from the last answer, and not while a request is arriving."""

    def answered(connection: Connection, route: Route, body: bytes) -> None:
        connection.feed(infer(body))
        route.submitted[-1][1].set_result(None)
        connection.settle()

    def idle(seconds: float) -> None:
        loop.run_until_complete(asyncio.sleep(seconds))

    route = Route(loop)
    connection = Connection(loop, route)
    connection.protocol.timeout_keep_alive = 0.2
    answered(connection, route, b"a")
    idle(0.12)
    answered(connection, route, b"b")  # within the timeout: it starts again from here
    idle(0.12)
    assert not connection.transport.closed
    idle(0.25)
    assert connection.transport.closed and connection.bodies() == [b"answer to a",
                                                                   b"answer to b"]
    busy = Connection(loop, route)
    busy.protocol.timeout_keep_alive = 0.1
    answered(busy, route, b"c")
    busy.feed(infer(b"d")[:20])  # a request begins: the header timeout (60 s) applies
    idle(0.3)
    assert not busy.transport.closed


def test_pipelined_answers_keep_their_order(loop):
    route = Route(loop)
    connection = Connection(loop, route)
    # An inference, a request for the application and another inference, in one read.
    connection.feed(infer(b"a") + infer(path="/other") + infer(b"b"))
    assert connection.bodies() == []  # the first is still running: the others wait
    route.submitted[0][1].set_result(None)
    connection.settle()
    assert connection.bodies() == [b"answer to a", b"app", b"app"]
    # The third request took the ASGI path (it arrived behind an unanswered one).
    assert [body for body, _ in route.submitted] == [b"a"]
    assert connection.app_paths == ["/other", "/v2/models/m/infer"]


@pytest.mark.parametrize("holds_requests", [True, False])
def test_a_disconnect_withdraws_a_held_request_and_nothing_is_written(loop, holds_requests):
    route = Route(loop, holds_requests)
    connection = Connection(loop, route)
    connection.feed(infer())
    future = route.submitted[0][1]
    connection.protocol.connection_lost(None)
    # As the ASGI path: a queued request is withdrawn, a running one finishes unread.
    assert future.cancelled() is holds_requests
    if not holds_requests:
        future.set_result(None)
    connection.settle()
    assert connection.bodies() == []


def test_shutdown_answers_the_request_in_flight_then_closes(loop):
    route = Route(loop)
    connection = Connection(loop, route)
    connection.feed(infer())
    connection.protocol.shutdown()
    assert not connection.transport.closed
    route.submitted[0][1].set_result(None)
    connection.settle()
    assert connection.bodies() == [b"answer to x"]
    assert b"connection: close\r\n" in connection.transport.written
    assert connection.transport.closed


def test_a_traced_server_takes_the_application_path(loop):
    route = Route(loop)
    route.server.tracer = object()
    connection = Connection(loop, route)
    connection.feed(infer())
    assert route.submitted == [] and connection.app_paths == ["/v2/models/m/infer"]
