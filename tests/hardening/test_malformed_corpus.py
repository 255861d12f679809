"""The malformed-request corpus against one server (issue 17): every kind of bad request in
corpus_http.py and corpus_grpc.py is answered within a bounded time, never with a 5xx,
INTERNAL or UNKNOWN, with a message that names what was wrong; no request makes the server
import a file from outside the repository; after the whole corpus the server is alive and
the next good inference is byte-identical to one made before it."""

from __future__ import annotations

import http.client
import textwrap

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from corpus_grpc import GRPC_KINDS, SERVICE, GRPCKind, infer, oversized_frame
from corpus_http import (
    EVIL,
    EVIL_DIR,
    EVIL_MARKER,
    HTTP_KINDS,
    REGION,
    TWO_RAW,
    HTTPKind,
    binary,
)
from hardening_support import ANSWER_TIMEOUT_S, exchange, request_bytes
from tritonclient.grpc import service_pb2 as pb

# The codes that mean the server failed rather than the request.
SERVER_FAULTS = ("INTERNAL", "UNKNOWN")
IN_STREAM = "error_message in the stream"

EVIL_MODEL = f"""
from pathlib import Path

Path({str(EVIL_MARKER)!r}).write_text("a load request made naiad import this file")


class TritonPythonModel:
    def execute(self, requests):
        return []
"""


def good_http_request() -> bytes:
    """add_sub with binary inputs and binary outputs: the bytes of the answer are exact."""
    body = TWO_RAW | {"outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                                  {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}
    data, headers = binary(body, np.arange(8, dtype=np.float32).tobytes())
    return request_bytes("POST", "/v2/models/add_sub/infer", data, headers)


def good_answers(port: int, channel: grpc.Channel) -> tuple[bytes, bytes]:
    answer = exchange(port, good_http_request())
    assert answer.status == 200, answer.error
    call = channel.unary_unary(SERVICE + "ModelInfer",
                               request_serializer=pb.ModelInferRequest.SerializeToString,
                               response_deserializer=None)
    return answer.body, call(infer(), timeout=ANSWER_TIMEOUT_S)


@pytest.fixture(scope="module")
def corpus(hardening_server):
    """The server, a gRPC channel to it, the region and the evil file the rows name, and
    the good answers made before the corpus ran."""
    EVIL_DIR.mkdir(exist_ok=True)
    EVIL_MARKER.unlink(missing_ok=True)
    (EVIL_DIR / "evil.py").write_text(textwrap.dedent(EVIL_MODEL))
    region = shm.create_shared_memory_region(REGION, "/" + REGION, 64)
    client = httpclient.InferenceServerClient(hardening_server.http_url)
    client.register_system_shared_memory(REGION, "/" + REGION, 64)
    channel = grpc.insecure_channel(hardening_server.grpc_url)
    try:
        yield hardening_server, channel, good_answers(hardening_server.http_port, channel)
    finally:
        channel.close()
        client.unregister_system_shared_memory(REGION)
        client.close()
        shm.destroy_shared_memory_region(region)
        for path in (EVIL_MARKER, EVIL_DIR / "evil.py"):
            path.unlink(missing_ok=True)
        EVIL_DIR.rmdir()


def contains_all(message: str, fragments: tuple[str, ...]) -> list[str]:
    """The fragments ``message`` lacks (case-insensitive)."""
    return [f for f in fragments if f.lower() not in message.lower()]


@pytest.mark.parametrize("kind", HTTP_KINDS, ids=lambda kind: kind.id)
def test_http_kind(corpus, kind: HTTPKind):
    server = corpus[0]
    request = kind.raw if kind.raw is not None else \
        request_bytes(kind.method, kind.path, kind.body, kind.headers)
    try:
        answer = exchange(server.http_port, request)
    except (OSError, http.client.HTTPException) as exc:
        pytest.fail(f"{kind.id}: no answer within {ANSWER_TIMEOUT_S} s "
                    f"({type(exc).__name__}: {exc})")
    described = f"{kind.id}: {answer.status} {answer.error[:300]!r}"
    assert 400 <= answer.status < 500, described
    if kind.status is not None:
        assert answer.status == kind.status, described
    assert not contains_all(answer.error, kind.fragments), \
        f"{described} does not name {contains_all(answer.error, kind.fragments)}"
    assert not EVIL_MARKER.exists(), f"{kind.id}: the server imported {EVIL}"


def _serialize(message: object) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def grpc_answer(channel: grpc.Channel, kind: GRPCKind) -> tuple[str, str]:
    """(status code name, message) of ``kind``'s call; a stream's first error_message
    counts as its answer (IN_STREAM)."""
    try:
        if kind.rpc == "ModelStreamInfer":
            call = channel.stream_stream(
                SERVICE + kind.rpc, request_serializer=_serialize,
                response_deserializer=pb.ModelStreamInferResponse.FromString)
            for response in call(iter(kind.request), timeout=ANSWER_TIMEOUT_S):
                if response.error_message:
                    return IN_STREAM, response.error_message
            return "OK", ""
        call = channel.unary_unary(SERVICE + kind.rpc, request_serializer=_serialize,
                                   response_deserializer=None)
        call(kind.request, timeout=ANSWER_TIMEOUT_S)
        return "OK", ""
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""


@pytest.mark.parametrize("kind", GRPC_KINDS, ids=lambda kind: kind.id)
def test_grpc_kind(corpus, kind: GRPCKind):
    code, message = grpc_answer(corpus[1], kind)
    described = f"{kind.id}: {code} {message[:300]!r}"
    assert code != "DEADLINE_EXCEEDED", f"{described}: no answer within {ANSWER_TIMEOUT_S} s"
    assert code not in ("OK", *SERVER_FAULTS), described
    if kind.code is not None:
        assert code == kind.code, described
    assert not contains_all(message, kind.fragments), \
        f"{described} does not name {contains_all(message, kind.fragments)}"
    assert not EVIL_MARKER.exists(), f"{kind.id}: the server imported {EVIL}"


def test_grpc_frame_whose_length_prefix_lies(corpus):
    """A message prefix announcing 2**31 bytes, 3 sent and the stream ended: answered."""
    try:
        status, message = oversized_frame(corpus[0].grpc_port, ANSWER_TIMEOUT_S)
    except OSError as exc:
        pytest.fail(f"no answer within {ANSWER_TIMEOUT_S} s ({type(exc).__name__}: {exc})")
    # a grpc-status: 13 is INTERNAL, 2 UNKNOWN; an RST_STREAM or GOAWAY says nothing
    assert status.isdigit() and status not in ("0", "2", "13"), (status, message)
    assert message, status


def test_alive_and_identical_after_the_corpus(corpus):
    server, channel, before = corpus
    assert server.process.poll() is None, server.log()[-3000:]
    assert good_answers(server.http_port, channel) == before
    assert not EVIL_MARKER.exists()


def test_the_corpus_is_as_broad_as_issue_17_asks():
    assert len(HTTP_KINDS) >= 60 and len(GRPC_KINDS) >= 20
    for table in (HTTP_KINDS, GRPC_KINDS):
        ids = [kind.id for kind in table]
        assert len(ids) == len(set(ids)), "one row per kind"
