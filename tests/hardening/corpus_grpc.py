"""The gRPC half of the malformed-request corpus: one row per kind of bad request, as data.

A row is a protobuf request (or raw bytes where no valid message could say it) sent to one
RPC; a stream row sends its requests on one ModelStreamInfer call. Each must be answered
within a bounded time with an error status other than INTERNAL and UNKNOWN (the row's exact
code when it names one; in a stream, an ``error_message`` or the call's status) whose message
holds every one of ``fragments`` (case-insensitive). ``EVIL`` and ``REGION`` are those of
corpus_http.py. Repository control rows aim at ``identity_bool`` (see corpus_http.py).
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass
from typing import Any

import h2.config
import h2.connection
import h2.events
import numpy as np
from corpus_http import ESCAPING_CONFIG, EVIL_CONFIG, REGION
from tritonclient.grpc import service_pb2 as pb

SERVICE = "/inference.GRPCInferenceService/"
FOUR = np.arange(4, dtype=np.float32).tobytes()


@dataclass(frozen=True)
class GRPCKind:
    """One kind of malformed gRPC request and what its answer must hold."""

    id: str
    rpc: str
    request: Any  # a message, raw bytes, or (stream) a list of either
    code: str | None = None  # a grpc.StatusCode name; None: any but INTERNAL / UNKNOWN
    fragments: tuple[str, ...] = ()


def tensor(name: str = "INPUT0", datatype: str = "FP32", shape: tuple = (4,),
           **contents: Any) -> pb.ModelInferRequest.InferInputTensor:
    item = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype,
                                                  shape=list(shape))
    for field_name, values in contents.items():
        getattr(item.contents, field_name).extend(values)
    return item


def infer(*inputs: pb.ModelInferRequest.InferInputTensor, model: str = "add_sub",
          raw: list[bytes] | None = None, version: str = "", **extra: Any
          ) -> pb.ModelInferRequest:
    """An add_sub request with raw contents; ``inputs`` replace both of its inputs."""
    if not inputs:
        inputs = (tensor(), tensor("INPUT1"))
        raw = [FOUR, FOUR] if raw is None else raw
    request = pb.ModelInferRequest(model_name=model, model_version=version,
                                   inputs=list(inputs), raw_input_contents=raw or [])
    for key, value in extra.pop("parameters", {}).items():
        request.parameters[key].CopyFrom(pb.InferParameter(**value))
    for key, value in extra.items():
        getattr(request, key).extend(value)
    return request


def shm_input(region: str, size: int = 16, offset: int = 0) -> pb.ModelInferRequest:
    first = tensor()
    first.parameters["shared_memory_region"].string_param = region
    first.parameters["shared_memory_byte_size"].int64_param = size
    first.parameters["shared_memory_offset"].int64_param = offset
    return infer(first, tensor("INPUT1"), raw=[FOUR])


def load(config: dict | str | None = None, **files: bytes) -> pb.RepositoryModelLoadRequest:
    request = pb.RepositoryModelLoadRequest(model_name="identity_bool")
    if config is not None:
        text = config if isinstance(config, str) else json.dumps(config)
        request.parameters["config"].string_param = text
    for path, content in files.items():
        request.parameters[f"file:{path}"].bytes_param = content
    return request


def register(key: str, offset: int = 0, size: int = 16
             ) -> pb.SystemSharedMemoryRegisterRequest:
    return pb.SystemSharedMemoryRegisterRequest(name="corpus_bad", key=key, offset=offset,
                                                byte_size=size)


def _invalid_utf8_name() -> bytes:
    """A ModelInferRequest whose model_name (a proto3 string) is not UTF-8."""
    good = infer(model="add_sub").SerializeToString()
    return good.replace(b"add_sub", b"add\xffsub", 1)


def bad_bytes(size: int = 4) -> bytes:
    """BYTES raw contents whose first length prefix claims ``size`` + 12 bytes."""
    return struct.pack("<I", size + 12) + b"x" * size


GRPC_KINDS: list[GRPCKind] = [
    GRPCKind("model_unknown", "ModelInfer", infer(model="no_such_model"), "NOT_FOUND",
             ("no_such_model",)),
    GRPCKind("version_unknown", "ModelInfer", infer(version="7"), "NOT_FOUND",
             ("add_sub", "7")),
    GRPCKind("version_not_a_number", "ModelInfer", infer(version="x1"), "INVALID_ARGUMENT",
             ("x1",)),
    GRPCKind("model_name_oversized", "ModelInfer", infer(model="m" * 10000), "NOT_FOUND",
             ("unknown model",)),
    # an answer echoing these names passes grpc's default 16 KiB hard metadata limit
    # (percent-encoded), so the client would get RESOURCE_EXHAUSTED instead of it
    GRPCKind("model_name_beyond_the_metadata_limit", "ModelInfer", infer(model="m" * 20000),
             "NOT_FOUND", ("unknown model",)),
    GRPCKind("model_name_multibyte_oversized", "ModelInfer", infer(model="\u00e9" * 3000),
             "NOT_FOUND", ("unknown model",)),
    GRPCKind("model_name_with_nul", "ModelInfer", infer(model="add\0sub"), "NOT_FOUND",
             ("unknown model",)),
    GRPCKind("model_name_invalid_utf8", "ModelInfer", _invalid_utf8_name(), "INVALID_ARGUMENT"),
    GRPCKind("input_missing", "ModelInfer", infer(tensor(), raw=[FOUR]), "INVALID_ARGUMENT",
             ("INPUT1",)),
    GRPCKind("input_unknown", "ModelInfer",
             infer(tensor(), tensor("INPUT1"), tensor("EXTRA"), raw=[FOUR] * 3),
             "INVALID_ARGUMENT", ("EXTRA",)),
    GRPCKind("datatype_wrong_for_model", "ModelInfer",
             infer(tensor(datatype="INT32"), tensor("INPUT1"), raw=[FOUR, FOUR]),
             "INVALID_ARGUMENT", ("INT32", "INPUT0")),
    GRPCKind("datatype_unknown", "ModelInfer",
             infer(tensor(datatype="FLOAT"), tensor("INPUT1"), raw=[FOUR, FOUR]),
             "INVALID_ARGUMENT", ("FLOAT",)),
    GRPCKind("shape_wrong_for_model", "ModelInfer",
             infer(tensor(shape=(2, 2)), tensor("INPUT1"), raw=[FOUR, FOUR]),
             "INVALID_ARGUMENT", ("INPUT0", "[4]")),
    GRPCKind("shape_negative", "ModelInfer",
             infer(tensor(shape=(-4,)), tensor("INPUT1"), raw=[FOUR, FOUR]),
             "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("shape_overflowing_product", "ModelInfer",
             infer(tensor(shape=(0, 2**62, 2**62)), model="identity_fp32", raw=[b""]),
             "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("raw_contents_too_short", "ModelInfer", infer(raw=[FOUR[:12], FOUR]),
             "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("raw_contents_too_long", "ModelInfer", infer(raw=[FOUR, FOUR + b"\0" * 4]),
             "INVALID_ARGUMENT", ("INPUT1",)),
    GRPCKind("raw_contents_one_too_many", "ModelInfer", infer(raw=[FOUR, FOUR, FOUR]),
             "INVALID_ARGUMENT", ("raw_input_contents",)),
    GRPCKind("raw_and_typed_contents", "ModelInfer",
             infer(tensor(fp32_contents=[1, 2, 3, 4]), tensor("INPUT1"), raw=[FOUR, FOUR]),
             "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("typed_contents_of_the_wrong_type", "ModelInfer",
             infer(tensor(int_contents=[1, 2, 3, 4]), tensor("INPUT1", fp32_contents=[1] * 4),
                   raw=[]), "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("typed_contents_too_few", "ModelInfer",
             infer(tensor(fp32_contents=[1, 2, 3]), tensor("INPUT1", fp32_contents=[1] * 4),
                   raw=[]), "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("bytes_length_prefix_lies", "ModelInfer",
             infer(tensor(datatype="BYTES", shape=(1,)), model="identity_bytes",
                   raw=[bad_bytes()]), "INVALID_ARGUMENT", ("INPUT0", "BYTES")),
    GRPCKind("parameter_priority_a_string", "ModelInfer",
             infer(parameters={"priority": {"string_param": "high"}}), "INVALID_ARGUMENT",
             ("priority",)),
    GRPCKind("parameter_sequence_start_a_string", "ModelInfer",
             infer(parameters={"sequence_start": {"string_param": "yes"}}),
             "INVALID_ARGUMENT", ("sequence_start",)),
    GRPCKind("parameter_custom_without_a_value", "ModelInfer",
             infer(parameters={"mine": {}}), "INVALID_ARGUMENT", ("mine",)),
    GRPCKind("output_unknown", "ModelInfer",
             infer(outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="OUTPUT9")]),
             "INVALID_ARGUMENT", ("OUTPUT9",)),
    GRPCKind("shm_input_unregistered", "ModelInfer", shm_input("not_registered"), "NOT_FOUND",
             ("not_registered", "INPUT0")),
    GRPCKind("shm_input_past_the_region", "ModelInfer", shm_input(REGION, 16, 60),
             "INVALID_ARGUMENT", (REGION, "INPUT0")),
    GRPCKind("shm_input_size_wrong_for_shape", "ModelInfer", shm_input(REGION, 12),
             "INVALID_ARGUMENT", ("INPUT0",)),
    GRPCKind("garbage_infer_message", "ModelInfer", b"\xff\xfe\xfd garbage \x00\x01",
             "INVALID_ARGUMENT"),
    GRPCKind("garbage_load_message", "RepositoryModelLoad", b"\x0a\xff\xff\xff\xff\x0f",
             "INVALID_ARGUMENT"),
    GRPCKind("load_config_not_json", "RepositoryModelLoad", load("{bad"), "INVALID_ARGUMENT",
             ("identity_bool",)),
    GRPCKind("load_config_of_the_wrong_type", "RepositoryModelLoad",
             pb.RepositoryModelLoadRequest(model_name="identity_bool", parameters={
                 "config": pb.ModelRepositoryParameter(int64_param=5)}),
             "INVALID_ARGUMENT", ("config",)),
    GRPCKind("load_file_leaving_the_folder", "RepositoryModelLoad",
             load("{}", **{"../x.py": b"hi"}), "INVALID_ARGUMENT", ("file:../x.py",)),
    GRPCKind("load_model_file_absolute", "RepositoryModelLoad", load(EVIL_CONFIG),
             "INVALID_ARGUMENT", ("default_model_filename",)),
    GRPCKind("load_model_file_escaping", "RepositoryModelLoad", load(ESCAPING_CONFIG),
             "INVALID_ARGUMENT", ("default_model_filename",)),
    GRPCKind("shm_register_unknown_key", "SystemSharedMemoryRegister",
             register("/h4_no_such"), "INVALID_ARGUMENT", ("/h4_no_such",)),
    GRPCKind("shm_register_past_the_object", "SystemSharedMemoryRegister",
             register("/" + REGION, 0, 2**40), "INVALID_ARGUMENT", ("corpus",)),
    GRPCKind("shm_status_unknown", "SystemSharedMemoryStatus",
             pb.SystemSharedMemoryStatusRequest(name="nope"), "NOT_FOUND", ("nope",)),
    GRPCKind("stream_unknown_model", "ModelStreamInfer", [infer(model="no_such_model")],
             fragments=("no_such_model",)),
    GRPCKind("stream_wrong_shape", "ModelStreamInfer",
             [infer(tensor(shape=(2, 2)), tensor("INPUT1"), raw=[FOUR, FOUR])],
             fragments=("INPUT0",)),
    # an undecodable message in a stream is an error response; the stream goes on
    GRPCKind("stream_garbage_message", "ModelStreamInfer", [b"\xff\xfe\xfd garbage"],
             fragments=("ModelInferRequest",)),
]


# --- below the gRPC library: a frame whose length prefix lies ---------------------------------


def oversized_frame(port: int, timeout: float) -> tuple[str, str]:
    """Open an HTTP/2 connection, start a ModelInfer call whose message prefix announces
    2**31 bytes, send 3 and end the stream. Returns (grpc-status, grpc-message) of the
    answer, or ("RST_STREAM <code>", "") / ("GOAWAY <code>", "") when the server resets;
    raises socket.timeout when nothing comes within ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [
            (":method", "POST"), (":scheme", "http"), (":path", SERVICE + "ModelInfer"),
            (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
            ("te", "trailers")])
        conn.send_data(stream, b"\0" + struct.pack(">I", 2**31) + b"abc", end_stream=True)
        sock.sendall(conn.data_to_send())
        headers: dict[str, str] = {}
        while True:
            data = sock.recv(65536)
            if not data:
                return "connection closed", ""
            for event in conn.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    headers.update((k.decode() if isinstance(k, bytes) else k,
                                    v.decode() if isinstance(v, bytes) else v)
                                   for k, v in event.headers)
                    if "grpc-status" in headers:
                        return headers["grpc-status"], headers.get("grpc-message", "")
                elif isinstance(event, h2.events.StreamReset):
                    return f"RST_STREAM {event.error_code}", ""
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return f"GOAWAY {event.error_code}", ""
            sock.sendall(conn.data_to_send())
