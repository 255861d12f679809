"""Requests on the wire, built once per data step and reused: the load must cost the client
as little CPU as possible, or the tool measures itself instead of the server.

HTTP goes over a plain keep-alive socket (a complete request's bytes prepared ahead, the
response read by its Content-Length); gRPC through tritonclient's generated stubs with
prepared ``ModelInferRequest`` messages. Control calls (metadata, statistics, shared memory
registration) use tritonclient's clients (naiad_perf.model).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from naiad_perf.inputs import Step

# A response header block larger than this is not a V2 server's answer.
MAX_HEADER_BYTES = 64 * 1024
RECV_BYTES = 256 * 1024


@dataclass(frozen=True)
class Sequence:
    """The sequence parameters of one request of a sequence model."""

    id: int
    start: bool
    end: bool


@dataclass(frozen=True)
class ShmRef:
    region: str
    offset: int
    size: int


@dataclass(frozen=True)
class ShmLayout:
    """Where each step's inputs lie in the worker's input regions, and each slot's output
    regions (region name per output)."""

    inputs: dict[tuple[int, int, str], ShmRef]     # (stream, step, input) -> place
    outputs: dict[int, dict[str, ShmRef]]           # slot -> output -> region


class HttpResponseError(Exception):
    pass


def http_request_bytes(host: str, model: str, version: str, step: Step, outputs: list[str],
                       stream_step: tuple[int, int], seq: Sequence | None,
                       shm: ShmLayout | None, slot: int) -> bytes:
    """A complete HTTP/1.1 inference request (headers and body)."""
    header: dict[str, Any] = {"inputs": []}
    blobs = []
    for tensor in step:
        entry: dict[str, Any] = {"name": tensor.name, "shape": list(tensor.shape),
                                 "datatype": tensor.datatype}
        if shm is not None:
            ref = shm.inputs[(*stream_step, tensor.name)]
            entry["parameters"] = {"shared_memory_region": ref.region,
                                   "shared_memory_byte_size": ref.size}
            if ref.offset:
                entry["parameters"]["shared_memory_offset"] = ref.offset
        else:
            entry["parameters"] = {"binary_data_size": len(tensor.raw)}
            blobs.append(tensor.raw)
        header["inputs"].append(entry)
    header["outputs"] = []
    for name in outputs:
        if shm is not None:
            ref = shm.outputs[slot][name]
            header["outputs"].append({"name": name, "parameters": {
                "shared_memory_region": ref.region, "shared_memory_byte_size": ref.size}})
        else:
            header["outputs"].append({"name": name, "parameters": {"binary_data": True}})
    if seq is not None:
        header["parameters"] = {"sequence_id": seq.id, "sequence_start": seq.start,
                                "sequence_end": seq.end}
    head = json.dumps(header, separators=(",", ":")).encode()
    body = head + b"".join(blobs)
    path = f"/v2/models/{quote(model)}" + (f"/versions/{version}" if version else "") + "/infer"
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(head)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def parse_response_head(head: bytes) -> tuple[int, int]:
    """(status, content length) of an HTTP/1.1 response header block."""
    status = int(head[9:12])
    length = -1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            raise HttpResponseError("chunked responses are not expected from /infer")
    if length < 0:
        raise HttpResponseError("a response without Content-Length")
    return status, length


def error_text(status: int, body: bytes) -> str:
    try:
        return f"HTTP {status}: {json.loads(body)['error']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {body[:200]!r}"


class HttpConnection:
    """One keep-alive connection, one request at a time (a concurrency slot's)."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = (host, port)
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, b""
        return sock

    def send(self, request: bytes) -> None:
        sock = self.sock or self._connect()
        try:
            sock.sendall(request)
        except OSError:
            self.close()  # the server closed an idle connection: one fresh attempt
            self._connect().sendall(request)

    def wait(self) -> None:
        """Until the first bytes of the response are there."""
        if not self.buffer:
            self._fill()

    def _fill(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            self.close()
            raise HttpResponseError("the server closed the connection")
        self.buffer += chunk

    def receive(self) -> tuple[int, bytes]:
        """The response's status and body."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > MAX_HEADER_BYTES:
                raise HttpResponseError("response header block too large")
            self._fill()
        status, length = parse_response_head(self.buffer[:end])
        total = end + 4 + length
        while len(self.buffer) < total:
            self._fill()
        body, self.buffer = self.buffer[end + 4:total], self.buffer[total:]
        return status, body

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""


def grpc_request(model: str, version: str, step: Step, outputs: list[str],
                 stream_step: tuple[int, int], seq: Sequence | None, shm: ShmLayout | None,
                 slot: int, final_response: bool) -> Any:
    """A ModelInferRequest message (tritonclient's generated protobuf)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for tensor in step:
        entry = request.inputs.add(name=tensor.name, datatype=tensor.datatype,
                                   shape=list(tensor.shape))
        if shm is not None:
            ref = shm.inputs[(*stream_step, tensor.name)]
            entry.parameters["shared_memory_region"].string_param = ref.region
            entry.parameters["shared_memory_byte_size"].int64_param = ref.size
            if ref.offset:
                entry.parameters["shared_memory_offset"].int64_param = ref.offset
        else:
            request.raw_input_contents.append(tensor.raw)
    for name in outputs:
        out = request.outputs.add(name=name)
        if shm is not None:
            ref = shm.outputs[slot][name]
            out.parameters["shared_memory_region"].string_param = ref.region
            out.parameters["shared_memory_byte_size"].int64_param = ref.size
    if seq is not None:
        request.parameters["sequence_id"].int64_param = seq.id
        request.parameters["sequence_start"].bool_param = seq.start
        request.parameters["sequence_end"].bool_param = seq.end
    if final_response:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def is_final(stream_response: Any) -> bool:
    """Whether a ModelStreamInferResponse closes its request (decoupled models send a
    final flag; others answer once)."""
    params = stream_response.infer_response.parameters
    if "triton_final_response" in params:
        return bool(params["triton_final_response"].bool_param)
    return True
