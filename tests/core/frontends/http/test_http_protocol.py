"""naiad's uvicorn protocol answering plain inferences itself (naiad.frontends.http.protocol),
end to end on raw sockets: it answers exactly as the ASGI path does (a query string sends the
same request down the ASGI path), keeps pipelined answers in order across both paths, reads a
body arriving in pieces and honours ``Connection: close``. Each test runs against a server in
one process and against one with frontend processes, whose plain inferences cross to the
engine as INFER frames (naiad.frontends.bridge) and whose ASGI path as REQUEST frames."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from zoo import IDENTITY_PY, RAISES_PY, identity_config, write_model

from naiad.testing import ServerProcess, naiad_server

WAIT = 20  # seconds: the longest a read may wait (reached only when an answer is missing)
DATA = [1.5, -2.0, 3.25, 4.0]


@pytest.fixture(scope="module", params=["one process", "frontend processes"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("protocol")
    write_model(repo, "identity", identity_config("identity", "TYPE_FP32"), IDENTITY_PY)
    write_model(repo, "raises", identity_config("raises", "TYPE_FP32"), RAISES_PY)
    processes = ["--frontend-processes", "2"] if request.param == "frontend processes" else []
    with naiad_server("--model-repository", str(repo), *processes) as started:
        yield started


def json_body(data: list[float] = DATA) -> bytes:
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(data)],
                                   "data": data}]}).encode()


def binary_body() -> tuple[bytes, int]:
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                                     "parameters": {"binary_data_size": 16}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()
    return header + struct.pack("<4f", *DATA), len(header)


def request(path: str, body: bytes | None = None, headers: dict[str, str] | None = None
            ) -> bytes:
    method = "GET" if body is None else "POST"
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` whole responses (status, headers without Date, body), in order."""
    data = b""
    answers = []
    deadline = time.monotonic() + WAIT
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in head[1:])
            length = int(headers["content-length"])
            if len(data) >= end + 4 + length:
                headers.pop("date", None)
                answers.append((int(head[0].split(" ")[1]), headers,
                                data[end + 4:end + 4 + length]))
                data = data[end + 4 + length:]
                continue
        assert time.monotonic() < deadline, f"{len(answers)} of {count} answers; {data[:200]!r}"
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} of {count} answers"
        data += chunk
    return answers


def exchange(server: ServerProcess, *requests: bytes
             ) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``requests`` in one write on one connection; their answers."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=WAIT) as sock:
        sock.sendall(b"".join(requests))
        return read_responses(sock, len(requests))


body, header_length = binary_body()
CASES = {  # name: (model, body, headers, the status expected)
    "json": ("identity", json_body(), {}, 200),
    "binary": ("identity", body, {"Inference-Header-Content-Length": str(header_length)}, 200),
    "unknown model": ("nope", json_body(), {}, 404),
    "not json": ("identity", b"{", {}, 400),
    "wrong input": ("identity", b'{"inputs": []}', {}, 400),
    "bad header length": ("identity", body, {"Inference-Header-Content-Length": "x"}, 400),
    "gzip body": ("identity", gzip.compress(json_body()), {"Content-Encoding": "gzip"}, 200),
    "gzip answer": ("identity", json_body(), {"Accept-Encoding": "gzip"}, 200),
    "model raises": ("raises", json_body(), {}, 400),  # as tritonserver answers it
    "connection close": ("identity", json_body(), {"Connection": "close"}, 200),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_answers_as_the_asgi_path(server: ServerProcess, case: str) -> None:
    model, payload, headers, expected = CASES[case]
    path = f"/v2/models/{model}/infer"
    # A query string is one of the things that send a request down uvicorn's ASGI path.
    (fast,) = exchange(server, request(path, payload, headers))
    (asgi,) = exchange(server, request(path + "?path=asgi", payload, headers))
    if case == "gzip answer":  # gzip's header holds the time it was written
        assert fast[1]["content-encoding"] == "gzip"
        fast, asgi = [(status, head, gzip.decompress(data)) for status, head, data in (fast, asgi)]
    assert fast == asgi
    assert fast[0] == expected, fast
    if case == "json":
        assert json.loads(fast[2])["outputs"][0]["data"] == DATA


def test_pipelined_answers_come_in_order_across_both_paths(server: ServerProcess) -> None:
    answers = exchange(server,
                       request("/v2/models/identity/infer", json_body([1.0])),
                       request("/v2/health/live"),
                       request("/v2/models/identity/infer?asgi", json_body([2.0])),
                       request("/v2/models/identity/infer", json_body([3.0])),
                       request("/v2/models/nope/infer", json_body([4.0])))
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 404]
    assert [json.loads(answers[i][2])["outputs"][0]["data"] for i in (0, 2, 3)] == \
        [[1.0], [2.0], [3.0]]


def test_a_body_arriving_in_pieces(server: ServerProcess) -> None:
    whole = request("/v2/models/identity/infer", json_body())
    cut = whole.index(b"\r\n\r\n") + 4
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=WAIT) as sock:
        for piece in (whole[:cut - 10], whole[cut - 10:cut + 5], whole[cut + 5:]):
            sock.sendall(piece)
            time.sleep(0.05)
        ((status, _, answer),) = read_responses(sock, 1)
    assert status == 200 and json.loads(answer)["outputs"][0]["data"] == DATA


def test_connection_close_is_answered_then_closed(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=WAIT) as sock:
        sock.sendall(request("/v2/models/identity/infer", json_body(),
                             {"Connection": "close"}))
        ((status, headers, _),) = read_responses(sock, 1)
        assert status == 200 and headers["connection"] == "close"
        assert sock.recv(1) == b""  # the server closed its side
