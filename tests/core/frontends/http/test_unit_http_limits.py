"""Unit tests of naiad.frontends.http.limits: the guarded httptools protocol driven read by
read through a recording transport (no sockets), and the hypercorn settings."""

from __future__ import annotations

import asyncio
import re

from uvicorn.config import Config
from uvicorn.server import ServerState

from naiad.frontends.http.limits import (
    GuardedHttpToolsProtocol,
    HTTPLimits,
    hypercorn_settings,
)

LIMITS = HTTPLimits(max_header_size=1024, max_header_count=10, keepalive_timeout=60,
                    header_timeout=60, body_timeout=60)


class Transport(asyncio.Transport):
    """Records what the protocol writes and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = self.eof = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


class Connection:
    """One guarded connection to an application that answers 200 with the body's length."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: HTTPLimits = LIMITS) -> None:
        self.loop = loop
        self.requests: list[dict] = []

        async def app(scope: dict, receive, send) -> None:
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            self.requests.append({"path": scope["path"], "body": body})
            text = str(len(body)).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(text)).encode())]})
            await send({"type": "http.response.body", "body": text})

        config = Config(app, lifespan="off", log_level="critical")
        self.transport = Transport()
        self.protocol = GuardedHttpToolsProtocol(config=config, server_state=ServerState(),
                                                 app_state={}, _loop=loop, limits=limits)
        self.protocol.connection_made(self.transport)

    def feed(self, *reads: bytes) -> None:
        for data in reads:
            self.protocol.data_received(data)
            self.loop.run_until_complete(asyncio.sleep(0.01))  # let the application run

    def statuses(self) -> list[int]:
        return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ",
                                                      self.transport.written)]

    def close(self) -> None:
        self.protocol.connection_lost(None)


def request(path: str = "/x", body: bytes = b"", extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


def test_headers_spread_over_many_reads_under_the_limit_pass(loop):
    connection = Connection(loop)
    data = request(extra=b"X-Pad: " + b"p" * 800 + b"\r\n")
    connection.feed(*(data[i:i + 7] for i in range(0, len(data), 7)))
    assert connection.statuses() == [200] and not connection.transport.closed
    connection.close()


def test_a_header_block_over_the_limit_in_pieces_is_refused(loop):
    connection = Connection(loop)
    connection.feed(b"GET / HTTP/1.1\r\nX-Long: ", *[b"a" * 200] * 6)
    assert connection.statuses() == [431] and connection.transport.eof
    assert b"--http-max-header-size (1024 bytes)" in connection.transport.written
    connection.feed(b"a" * 200)  # dropped, not parsed
    assert connection.statuses() == [431] and not connection.requests
    connection.close()


def test_a_large_body_in_the_same_read_as_small_headers_passes(loop):
    connection = Connection(loop)
    connection.feed(request(body=b"b" * 10_000))
    assert connection.statuses() == [200] and connection.requests[0]["body"] == b"b" * 10_000
    connection.close()


def test_large_headers_and_a_body_in_one_read_are_refused(loop):
    connection = Connection(loop)
    connection.feed(request(body=b"b" * 10, extra=b"X-Big: " + b"x" * 1100 + b"\r\n"))
    assert connection.statuses() == [431] and not connection.requests
    connection.close()


def test_a_pipelined_request_after_a_large_body_is_not_charged_for_it(loop):
    connection = Connection(loop)
    second = request("/second")
    # One read: a whole request with a body over the header limit, then half of the next
    # request's headers; the next read completes it.
    connection.feed(request("/first", body=b"b" * 5_000) + second[:20], second[20:])
    assert [r["path"] for r in connection.requests] == ["/first", "/second"]
    assert connection.statuses() == [200, 200]
    connection.close()


def test_too_many_header_fields_are_refused(loop):
    connection = Connection(loop)
    connection.feed(request(extra=b"".join(b"X-%d: v\r\n" % i for i in range(12))))
    assert connection.statuses() == [431]
    assert b"--http-max-header-count (10)" in connection.transport.written
    connection.close()


def test_timeouts_answer_408_or_close(loop):
    quick = HTTPLimits(max_header_size=1024, max_header_count=10, keepalive_timeout=0.05,
                       header_timeout=0.05, body_timeout=0.05)
    idle = Connection(loop, quick)
    loop.run_until_complete(asyncio.sleep(0.2))
    assert idle.transport.closed and idle.transport.written == b""  # nothing to answer
    slow = Connection(loop, quick)
    slow.feed(b"GET / HTTP/1.1\r\nHost")
    loop.run_until_complete(asyncio.sleep(0.2))
    assert slow.statuses() == [408] and b"--http-header-timeout" in slow.transport.written
    stalled = Connection(loop, quick)
    stalled.feed(request(body=b"0123456789")[:-4])
    loop.run_until_complete(asyncio.sleep(0.2))
    assert stalled.statuses() == [408] and b"--http-body-timeout" in stalled.transport.written
    for connection in (idle, slow, stalled):
        connection.close()


def test_hypercorn_gets_the_same_limits():
    assert hypercorn_settings(LIMITS) == {"h11_max_incomplete_size": 1024,
                                          "h2_max_header_list_size": 1024,
                                          "keep_alive_timeout": 60}


def test_a_pipelined_request_after_the_end_of_a_body_is_not_charged_for_it(loop):
    connection = Connection(loop)
    first, second = request("/first", body=b"b" * 5_000), request("/second")
    # The first request's body spans two reads; the second read also starts the next one.
    connection.feed(first[:100], first[100:] + second[:20], second[20:])
    assert [r["path"] for r in connection.requests] == ["/first", "/second"]
    connection.close()
