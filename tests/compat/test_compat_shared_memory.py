"""Shared memory and the extension list, differential: the same calls to Triton and naiad.

* ``GET /v2`` / ServerMetadata: naiad lists exactly Triton's extensions, in Triton's order,
  less NOT_IMPLEMENTED (docs/compatibility.md says why each is left out).
* CUDA shared memory (neither server holds a CUDA region here): status, unregister and a
  named status answer the same bytes; registering fails on both (naiad says why).
* System shared memory: each server gets its own /dev/shm object under the same region name,
  inputs are read from it and outputs written to it. HTTP responses must be equal byte for
  byte (status, Content-Type, Inference-Header-Content-Length, body), gRPC responses equal as
  messages, and the bytes written into the two regions equal. Refused requests get the same
  status (naiad's messages name the output), except an output region too small for the
  result: Triton 500 / INTERNAL, naiad 400 / INVALID_ARGUMENT (a deliberate difference).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from compat_helpers import grpc_call, http_request, on_both

pytestmark = pytest.mark.compat

grpc = pytest.importorskip("grpc")
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.grpc import service_pb2_grpc as pbg  # noqa: E402

# the models these requests name (conftest.py serves only these)
COMPAT_MODELS = ("add_sub", "identity_batch", "strings")
NOT_IMPLEMENTED = {"cuda_shared_memory"}
REGION = "cmp"
REGION_SIZE = 256
A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)
# Where the inputs sit in the region, and the first free byte for outputs.
IN0, IN1, OUT = 0, 16, 64


@dataclass
class Side:
    """One server, its gRPC stub and its own region."""

    server: Any
    stub: Any
    handle: Any = None

    def region_bytes(self) -> bytes:
        return bytes(shm.get_contents_as_numpy(self.handle, np.uint8, [REGION_SIZE]))


@dataclass
class Pair:
    triton: Side
    naiad: Side
    sides: tuple[Side, Side] = field(init=False)

    def __post_init__(self) -> None:
        self.sides = (self.triton, self.naiad)

    def reset_regions(self) -> None:
        for side in self.sides:
            shm.set_shared_memory_region(side.handle, [np.zeros(REGION_SIZE, np.uint8)])
            shm.set_shared_memory_region(side.handle, [A, B])


@pytest.fixture(scope="module")
def pair(servers: Any) -> Iterator[Pair]:
    channels = [grpc.insecure_channel(s.grpc_url) for s in (servers.triton, servers.naiad)]
    sides = [Side(s, pbg.GRPCInferenceServiceStub(c))
             for s, c in zip((servers.triton, servers.naiad), channels, strict=True)]
    try:
        for side in sides:
            key = f"/naiad-compat-{uuid.uuid4().hex[:12]}"
            side.handle = shm.create_shared_memory_region(REGION, key, REGION_SIZE)
            res = http_request(side.server.http_port, "POST",
                               f"/v2/systemsharedmemory/region/{REGION}/register",
                               {"key": key, "offset": 0, "byte_size": REGION_SIZE})
            assert res.status == 200, res
        yield Pair(*sides)
    finally:
        for side in sides:
            http_request(side.server.http_port, "POST", "/v2/systemsharedmemory/unregister")
            if side.handle is not None:
                shm.destroy_shared_memory_region(side.handle)
        for channel in channels:
            channel.close()


# --- the extension list ---------------------------------------------------------------------


def test_extensions_are_tritons_less_what_naiad_does_not_implement(pair: Pair,
                                                                  strict: bool) -> None:
    t, n = on_both(lambda s: http_request(s.server.http_port, "GET", "/v2").json(),
                   pair.triton, pair.naiad)
    expected = [e for e in t["extensions"] if not strict or e not in NOT_IMPLEMENTED]
    assert n["extensions"] == expected
    tg, ng = on_both(lambda s: grpc_call(s.stub, "ServerMetadata", pb.ServerMetadataRequest()),
                     pair.triton, pair.naiad)
    assert list(tg.message.extensions) == t["extensions"]
    assert list(ng.message.extensions) == expected


# --- CUDA shared memory ----------------------------------------------------------------------

CUDA_SAME = [
    ("GET", "/v2/cudasharedmemory/status"),
    ("GET", "/v2/cudasharedmemory/region/r/status"),
    ("POST", "/v2/cudasharedmemory/unregister"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister"),
]


@pytest.mark.parametrize(("method", "path"), CUDA_SAME)
def test_http_cuda_shared_memory_answers_the_same(pair: Pair, method: str, path: str) -> None:
    t, n = on_both(lambda s: http_request(s.server.http_port, method, path),
                   pair.triton, pair.naiad)
    assert (n.status, n.content_type, n.body) == (t.status, t.content_type, t.body), (t, n)


def test_http_cuda_registration_fails_on_both(pair: Pair, strict: bool) -> None:
    body = {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 16}
    t, n = on_both(lambda s: http_request(s.server.http_port, "POST",
                                          "/v2/cudasharedmemory/region/r/register", body),
                   pair.triton, pair.naiad)
    assert t.status == n.status == 400, (t, n)
    if strict:
        assert "'r'" in n.json()["error"]


@pytest.mark.parametrize(("method", "request_"), [
    ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()),
    ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="r")),
    ("CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest()),
    ("CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest(name="r")),
], ids=["status", "status-named", "unregister-all", "unregister-named"])
def test_grpc_cuda_shared_memory_answers_the_same(pair: Pair, method: str,
                                                  request_: Any) -> None:
    t, n = on_both(lambda s: grpc_call(s.stub, method, request_), pair.triton, pair.naiad)
    assert (n.code, n.details) == (t.code, t.details)
    assert n.message == t.message


def test_grpc_cuda_registration_fails_on_both(pair: Pair, strict: bool) -> None:
    request = pb.CudaSharedMemoryRegisterRequest(name="r", raw_handle=bytes(64), byte_size=16)
    t, n = on_both(lambda s: grpc_call(s.stub, "CudaSharedMemoryRegister", request),
                   pair.triton, pair.naiad)
    assert t.code != "OK" and n.code != "OK", (t, n)
    if strict:
        assert n.code == "UNIMPLEMENTED" and "'r'" in n.details


# --- system shared memory over HTTP -----------------------------------------------------------


def _shm(offset: int, size: int = 16, **extra: Any) -> dict[str, Any]:
    return {"shared_memory_region": REGION, "shared_memory_byte_size": size,
            "shared_memory_offset": offset, **extra}


SHM_INPUTS = [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "parameters": _shm(IN0)},
              {"name": "INPUT1", "datatype": "FP32", "shape": [4], "parameters": _shm(IN1)}]
JSON_INPUTS = [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": A.tolist()},
               {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": B.tolist()}]

HTTP_GOOD = {
    "all-outputs-in-shm": ("add_sub", {"inputs": SHM_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(OUT)},
        {"name": "OUTPUT1", "parameters": _shm(OUT + 16)}]}),
    "shm-and-binary-with-id": ("add_sub", {"id": "r1", "inputs": SHM_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(OUT)},
        {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}),
    "shm-and-json": ("add_sub", {"inputs": JSON_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(OUT, binary_data=False)},
        {"name": "OUTPUT1"}]}),
    "binary-data-output-and-shm": ("add_sub", {
        "inputs": SHM_INPUTS, "parameters": {"binary_data_output": True}, "outputs": [
            {"name": "OUTPUT0", "parameters": _shm(OUT)}, {"name": "OUTPUT1"}]}),
    "binary-data-output-named-output": ("add_sub", {
        "inputs": JSON_INPUTS, "parameters": {"binary_data_output": True},
        "outputs": [{"name": "OUTPUT1"}]}),
    "bytes-output-in-shm": ("strings", {"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [2], "data": ["ab", "wörld"]}],
        "outputs": [{"name": "OUTPUT0", "parameters": _shm(OUT, 64)}]}),
    "batch-in-shm": ("identity_batch", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [2, 2], "parameters": _shm(IN0)}],
        "outputs": [{"name": "OUTPUT0", "parameters": _shm(OUT)}]}),
}


@pytest.mark.parametrize("case", list(HTTP_GOOD))
def test_http_shared_memory_bodies_are_tritons(pair: Pair, case: str) -> None:
    model, body = HTTP_GOOD[case]
    pair.reset_regions()
    t, n = on_both(lambda s: http_request(s.server.http_port, "POST",
                                          f"/v2/models/{model}/infer", body),
                   pair.triton, pair.naiad)
    assert t.status == 200, t
    for header in ("content-type", "inference-header-content-length"):
        assert n.headers.get(header) == t.headers.get(header), (header, t, n)
    assert n.body == t.body
    assert pair.naiad.region_bytes() == pair.triton.region_bytes()


HTTP_REFUSED = {
    # (model, body, Triton's status, naiad's status)
    "shm-and-binary-data": ("add_sub", {"inputs": JSON_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(OUT, binary_data=True)}]}, 400, 400),
    "unregistered-region": ("add_sub", {"inputs": JSON_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": {**_shm(OUT), "shared_memory_region": "nope"}}]},
        404, 404),
    "unregistered-input-region": ("add_sub", {"inputs": [
        {**SHM_INPUTS[0], "parameters": {**_shm(IN0), "shared_memory_region": "nope"}},
        SHM_INPUTS[1]]}, 404, 404),
    "outside-the-region": ("add_sub", {"inputs": JSON_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(REGION_SIZE - 8)}]}, 400, 400),
    "region-too-small-for-the-output": ("add_sub", {"inputs": JSON_INPUTS, "outputs": [
        {"name": "OUTPUT0", "parameters": _shm(OUT, 8)}]}, 500, 400),
}


@pytest.mark.parametrize("case", list(HTTP_REFUSED))
def test_http_shared_memory_refusals(pair: Pair, strict: bool, case: str) -> None:
    model, body, triton_status, naiad_status = HTTP_REFUSED[case]
    t, n = on_both(lambda s: http_request(s.server.http_port, "POST",
                                          f"/v2/models/{model}/infer", body),
                   pair.triton, pair.naiad)
    assert t.status == triton_status, t
    assert n.status == (naiad_status if strict else triton_status), n
    if strict:
        message = n.json()["error"]
        assert f"of model '{model}'" in message and ("'OUTPUT0'" in message
                                                     or "'INPUT0'" in message), message


# --- system shared memory over gRPC ----------------------------------------------------------


def _grpc_request(model: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
                  request_id: str = "") -> Any:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    for item in inputs:
        tensor = request.inputs.add(name=item["name"], datatype=item["datatype"],
                                    shape=item["shape"])
        _set_params(tensor.parameters, item.get("parameters", {}))
        if "data" in item:
            tensor.contents.fp32_contents.extend(item["data"])
    for item in outputs:
        _set_params(request.outputs.add(name=item["name"]).parameters,
                    item.get("parameters", {}))
    return request


def _set_params(target: Any, params: dict[str, Any]) -> None:
    for key, value in params.items():
        if isinstance(value, bool):
            target[key].bool_param = value
        elif isinstance(value, int):
            target[key].int64_param = value
        else:
            target[key].string_param = value


GRPC_CASES = {
    "all-outputs-in-shm": _grpc_request("add_sub", SHM_INPUTS, [
        {"name": "OUTPUT0", "parameters": _shm(OUT)},
        {"name": "OUTPUT1", "parameters": _shm(OUT + 16)}]),
    "one-output-in-shm-with-id": _grpc_request("add_sub", SHM_INPUTS, [
        {"name": "OUTPUT0", "parameters": _shm(OUT)}, {"name": "OUTPUT1"}], "g1"),
    "shm-with-binary-data": _grpc_request("add_sub", JSON_INPUTS, [
        {"name": "OUTPUT0", "parameters": _shm(OUT, binary_data=True)}]),
    "unregistered-region": _grpc_request("add_sub", JSON_INPUTS, [
        {"name": "OUTPUT0", "parameters": {**_shm(OUT), "shared_memory_region": "nope"}}]),
    "outside-the-region": _grpc_request("add_sub", JSON_INPUTS, [
        {"name": "OUTPUT0", "parameters": _shm(REGION_SIZE - 8)}]),
}


@pytest.mark.parametrize("case", list(GRPC_CASES))
def test_grpc_shared_memory_answers_are_tritons(pair: Pair, strict: bool, case: str) -> None:
    pair.reset_regions()
    request = GRPC_CASES[case]
    t, n = on_both(lambda s: grpc_call(s.stub, "ModelInfer", request), pair.triton, pair.naiad)
    assert n.code == t.code, (t, n)
    assert n.message == t.message
    if t.code == "OK":
        assert pair.naiad.region_bytes() == pair.triton.region_bytes()
    elif strict:
        assert "'OUTPUT0' of model 'add_sub'" in n.details, n


def test_an_unknown_system_region_answers_the_same(pair: Pair) -> None:
    t, n = on_both(lambda s: http_request(s.server.http_port, "POST",
                                          f"/v2/systemsharedmemory/region/{REGION}x/unregister"),
                   pair.triton, pair.naiad)
    assert (n.status, n.body) == (t.status, t.body) == (200, b"")
    t, n = on_both(lambda s: http_request(s.server.http_port, "GET",
                                          f"/v2/systemsharedmemory/region/{REGION}x/status"),
                   pair.triton, pair.naiad)
    assert (n.status, n.body) == (t.status, t.body), (t, n)
