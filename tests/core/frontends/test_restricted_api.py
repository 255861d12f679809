"""Endpoint restrictions end to end (``--http-restricted-api``, ``--grpc-restricted-protocol``):
real ``naiad serve`` processes driven by raw requests and the official tritonclient.

What is expected is what tritonserver 2.51 answers (observed): HTTP 403 with
``{"error":"This API is restricted, expecting header '<key>'"}``; gRPC UNAVAILABLE with
"This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'", for a stream
as a whole. The API group of each route and RPC is Triton's.
"""

from __future__ import annotations

import http.client
import json
import queue
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from params_model import INPUT, params_repository, seen_parameters
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from naiad.testing import naiad_server

GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
          "model-repository", "statistics", "trace", "logging")
PREFIX = "triton-grpc-protocol-"


def key(group: str) -> str:
    return f"{group}-key"


def value(group: str) -> str:
    return f"{group}-value"


def http_refusal(header: str) -> dict:
    return {"error": f"This API is restricted, expecting header '{header}'"}


def grpc_refusal(header: str) -> str:
    return f"This protocol is restricted, expecting header '{PREFIX}{header}'"


def raw(port: int, method: str, path: str, body: str | None = None,
        headers: list[tuple[str, str]] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, val in headers or []:
            conn.putheader(name, val)
        data = (body or "").encode()
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


INFER = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32",
                                "data": [1]}]})

# (group, method, path, body, status once the header is there): every route naiad serves.
HTTP_ROUTES = [
    ("health", "GET", "/v2/health/live", None, 200),
    ("health", "GET", "/v2/health/ready", None, 200),
    ("health", "GET", "/v2/models/params/ready", None, 200),
    ("health", "GET", "/v2/models/params/versions/1/ready", None, 200),
    ("metadata", "GET", "/v2", None, 200),
    ("metadata", "GET", "/v2/models/params", None, 200),
    ("metadata", "GET", "/v2/models/params/versions/1", None, 200),
    ("statistics", "GET", "/v2/models/stats", None, 200),
    ("statistics", "GET", "/v2/models/params/stats", None, 200),
    ("statistics", "GET", "/v2/models/params/versions/1/stats", None, 200),
    ("model-config", "GET", "/v2/models/params/config", None, 200),
    ("model-config", "GET", "/v2/models/params/versions/1/config", None, 200),
    ("inference", "POST", "/v2/models/params/infer", INFER, 200),
    ("inference", "POST", "/v2/models/params/versions/1/infer", INFER, 200),
    ("inference", "POST", "/v2/models/nope/infer", INFER, 404),
    # The header is checked before the method, as tritonserver does.
    ("inference", "GET", "/v2/models/params/infer", None, 405),
    ("model-repository", "POST", "/v2/repository/index", "{}", 200),
    ("model-repository", "GET", "/v2/repository/index", None, 405),
    ("model-repository", "POST", "/v2/repository/models/nope/load", "{}", 503),
    ("model-repository", "POST", "/v2/repository/models/nope/unload", "{}", 503),
    ("shared-memory", "GET", "/v2/systemsharedmemory/status", None, 200),
    ("shared-memory", "GET", "/v2/systemsharedmemory/region/x/status", None, 404),
    ("shared-memory", "POST", "/v2/systemsharedmemory/region/x/register", "{}", 400),
    ("shared-memory", "POST", "/v2/systemsharedmemory/unregister", "{}", 200),
    ("shared-memory", "POST", "/v2/systemsharedmemory/region/x/unregister", "{}", 200),
    ("shared-memory", "GET", "/v2/cudasharedmemory/status", None, 200),
    ("shared-memory", "GET", "/v2/cudasharedmemory/region/x/status", None, 404),
    ("shared-memory", "POST", "/v2/cudasharedmemory/region/x/register", "{}", 400),
    ("shared-memory", "POST", "/v2/cudasharedmemory/unregister", "{}", 200),
    ("shared-memory", "POST", "/v2/cudasharedmemory/region/x/unregister", "{}", 200),
    ("logging", "GET", "/v2/logging", None, 200),
    ("logging", "POST", "/v2/logging", "{}", 200),
    ("trace", "GET", "/v2/trace/setting", None, 200),
    ("trace", "GET", "/v2/models/params/trace/setting", None, 200),
    ("trace", "POST", "/v2/trace/setting", "{}", 200),
]


def infer_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="params")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    return request


# (group, RPC, request, status code once the header is there): every unary RPC.
GRPC_CALLS = [
    ("health", "ServerLive", pb.ServerLiveRequest(), "OK"),
    ("health", "ServerReady", pb.ServerReadyRequest(), "OK"),
    ("health", "ModelReady", pb.ModelReadyRequest(name="params"), "OK"),
    ("metadata", "ServerMetadata", pb.ServerMetadataRequest(), "OK"),
    ("metadata", "ModelMetadata", pb.ModelMetadataRequest(name="params"), "OK"),
    ("inference", "ModelInfer", infer_request(), "OK"),
    ("model-config", "ModelConfig", pb.ModelConfigRequest(name="params"), "OK"),
    ("statistics", "ModelStatistics", pb.ModelStatisticsRequest(name="params"), "OK"),
    ("model-repository", "RepositoryIndex", pb.RepositoryIndexRequest(), "OK"),
    ("model-repository", "RepositoryModelLoad",
     pb.RepositoryModelLoadRequest(model_name="nope"), "UNAVAILABLE"),
    ("model-repository", "RepositoryModelUnload",
     pb.RepositoryModelUnloadRequest(model_name="nope"), "UNAVAILABLE"),
    ("shared-memory", "SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(), "OK"),
    ("shared-memory", "SystemSharedMemoryRegister",
     pb.SystemSharedMemoryRegisterRequest(name="x"), "INVALID_ARGUMENT"),
    ("shared-memory", "SystemSharedMemoryUnregister",
     pb.SystemSharedMemoryUnregisterRequest(name="x"), "OK"),
    ("shared-memory", "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(), "OK"),
    ("shared-memory", "CudaSharedMemoryRegister", pb.CudaSharedMemoryRegisterRequest(name="x"),
     "UNIMPLEMENTED"),
    ("shared-memory", "CudaSharedMemoryUnregister",
     pb.CudaSharedMemoryUnregisterRequest(name="x"), "OK"),
    ("trace", "TraceSetting", pb.TraceSettingRequest(), "OK"),
    ("logging", "LogSettings", pb.LogSettingsRequest(), "OK"),
]


def call(stub, rpc: str, request, metadata: list[tuple[str, str]]) -> tuple[str, str]:
    try:
        getattr(stub, rpc)(request, metadata=metadata, timeout=30)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", ""


# --- every group restricted, each with its own header -----------------------------------------


def every_group_server(repo: Path, *extra: str):
    """A server with every group restricted, each with its own header."""
    args = []
    for group in GROUPS:
        args += [f"--http-restricted-api={group}:{key(group)}={value(group)}",
                 f"--grpc-restricted-protocol={group}:{key(group)}={value(group)}"]
    # Health is restricted too: readiness is asked with its header.
    return naiad_server("--model-repository", str(params_repository(repo)), *args, *extra,
                        ready_headers={key("health"): value("health")})


@pytest.fixture(scope="module")
def every_group(tmp_path_factory):
    with every_group_server(tmp_path_factory.mktemp("restricted-all")) as server:
        yield server


@pytest.fixture(scope="module")
def every_group_stub(every_group):
    with grpc.insecure_channel(every_group.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize(("group", "method", "path", "body", "status"), HTTP_ROUTES,
                         ids=[f"{m} {p}" for _, m, p, _, _ in HTTP_ROUTES])
def test_http_route_needs_exactly_its_groups_header(every_group, group, method, path, body,
                                                    status):
    port = every_group.http_port
    others = [(key(g), value(g)) for g in GROUPS if g != group]
    for headers in ([], others, [(key(group), value(group) + "x")],
                    [(key(group), value(group).upper())], [(key(group), "")]):
        got, data = raw(port, method, path, body, headers)
        assert (got, json.loads(data)) == (403, http_refusal(key(group))), headers
    got, data = raw(port, method, path, body, [(key(group), value(group))])
    assert got == status, data
    # HTTP header names ignore case.
    got, data = raw(port, method, path, body, [(key(group).upper(), value(group))])
    assert got == status, data


def test_unknown_paths_stay_not_found_without_any_header(every_group):
    for path in ("/v2/nope", "/v2/models/params/bogus"):
        got, data = raw(every_group.http_port, "GET", path)
        assert got == 404, data


@pytest.mark.parametrize(("group", "rpc", "request_", "code"), GRPC_CALLS,
                         ids=[rpc for _, rpc, _, _ in GRPC_CALLS])
def test_grpc_rpc_needs_exactly_its_groups_header(every_group_stub, group, rpc, request_, code):
    others = [(PREFIX + key(g), value(g)) for g in GROUPS if g != group]
    for metadata in ([], others, [(PREFIX + key(group), value(group) + "x")],
                     # The HTTP form of the header does not count over gRPC.
                     [(key(group), value(group))]):
        assert call(every_group_stub, rpc, request_, metadata) == (
            "UNAVAILABLE", grpc_refusal(key(group))), metadata
    got, details = call(every_group_stub, rpc, request_, [(PREFIX + key(group), value(group))])
    assert got == code and "restricted" not in details, details


def stream(stub, metadata: list[tuple[str, str]]) -> list[str]:
    """Two requests on one ModelStreamInfer; their error messages ('' when answered)."""
    answers = stub.ModelStreamInfer(iter([infer_request(), infer_request()]),
                                    metadata=metadata, timeout=30)
    return [answer.error_message for answer in answers]


def test_grpc_stream_is_refused_as_a_whole(every_group_stub):
    stream_is_refused_as_a_whole(every_group_stub)


def test_grpc_stream_is_refused_as_a_whole_through_a_frontend_process(tmp_path):
    """The engine checks the header of a stream a frontend process forwards to its loop
    (frames.GRPC_STREAM) as a single-process server does."""
    with every_group_server(tmp_path, "--frontend-processes=1") as server, \
            grpc.insecure_channel(server.grpc_url) as channel:
        stream_is_refused_as_a_whole(service_pb2_grpc.GRPCInferenceServiceStub(channel))


def stream_is_refused_as_a_whole(stub) -> None:
    for metadata in ([], [(PREFIX + key("inference"), "wrong")],
                     [(PREFIX + key("health"), value("health"))]):
        with pytest.raises(grpc.RpcError) as info:
            stream(stub, metadata)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert info.value.details() == grpc_refusal(key("inference"))
    assert stream(stub, [(PREFIX + key("inference"), value("inference"))]) == ["", ""]


# --- some groups restricted, two sharing one header ---------------------------------------


@pytest.fixture(scope="module")
def some_groups(tmp_path_factory):
    repo = params_repository(tmp_path_factory.mktemp("restricted-some"))
    args = []
    for spec in ("model-repository,model-config:admin-key=admin-value",
                 "inference:infer-key=infer-value",
                 # A value holding ":" and "=": the specification splits at the first of each.
                 "shared-memory:shm-key=a=b:c"):
        args += [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
    with naiad_server("--model-repository", str(repo), *args) as server:
        yield server


@pytest.fixture(scope="module")
def http_client(some_groups):
    with httpclient.InferenceServerClient(some_groups.http_url) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(some_groups):
    with grpcclient.InferenceServerClient(some_groups.grpc_url) as client:
        yield client


def http_refused(call_, header: str, **kwargs) -> None:
    with pytest.raises(InferenceServerException) as info:
        call_(**kwargs)
    assert info.value.status() == "403"
    assert info.value.message() == http_refusal(header)["error"]


def grpc_refused(call_, header: str, **kwargs) -> None:
    with pytest.raises(InferenceServerException) as info:
        call_(**kwargs)
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert info.value.message() == grpc_refusal(header)


def http_inputs() -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", [1], "FP32")]
    inputs[0].set_data_from_numpy(INPUT)
    return inputs


def grpc_inputs() -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", [1], "FP32")]
    inputs[0].set_data_from_numpy(INPUT)
    return inputs


def test_http_inference_with_tritonclient(http_client):
    infer = http_client.infer
    for headers in (None, {"infer-key": "wrong"}, {"infer-key": "INFER-VALUE"},
                    {"admin-key": "admin-value"}):
        http_refused(infer, "infer-key", model_name="params", inputs=http_inputs(),
                     headers=headers)
    for headers in ({"infer-key": "infer-value"}, {"Infer-Key": "infer-value"},
                    {"infer-key": "infer-value", "admin-key": "admin-value"}):
        result = infer("params", http_inputs(), headers=headers)
        assert seen_parameters(result) == {}  # no forward pattern: no header reaches the model


def test_http_one_header_for_two_groups(http_client):
    admin = {"admin-key": "admin-value"}
    for call_ in (http_client.get_model_config, http_client.get_model_repository_index):
        kwargs = {"model_name": "params"} if call_ == http_client.get_model_config else {}
        http_refused(call_, "admin-key", **kwargs)
        http_refused(call_, "admin-key", headers={"infer-key": "infer-value"}, **kwargs)
        http_refused(call_, "admin-key", headers={"admin-key": "admin-valu"}, **kwargs)
        assert call_(headers=admin, **kwargs)
    assert http_client.get_model_config("params", headers=admin)["name"] == "params"


def test_http_value_with_colon_and_equals(http_client):
    http_refused(http_client.get_system_shared_memory_status, "shm-key")
    http_refused(http_client.get_system_shared_memory_status, "shm-key",
                 headers={"shm-key": "a=b"})
    assert http_client.get_system_shared_memory_status(headers={"shm-key": "a=b:c"}) == []


def test_http_unrestricted_groups_need_no_header(http_client):
    for headers in (None, {"admin-key": "wrong"}, {"infer-key": "infer-value"}):
        assert http_client.is_server_live(headers=headers)
        assert http_client.is_server_ready(headers=headers)
        assert http_client.is_model_ready("params", headers=headers)
        assert http_client.get_server_metadata(headers=headers)["name"] == "naiad"
        assert http_client.get_model_metadata("params", headers=headers)["name"] == "params"
        stats = http_client.get_inference_statistics("params", headers=headers)
        assert stats["model_stats"][0]["name"] == "params"


def test_http_first_of_repeated_headers_counts(some_groups):
    port = some_groups.http_port
    path = "/v2/models/params/config"
    got, _ = raw(port, "GET", path, None, [("admin-key", "x"), ("admin-key", "admin-value")])
    assert got == 403
    got, _ = raw(port, "GET", path, None, [("admin-key", "admin-value"), ("admin-key", "x")])
    assert got == 200


def test_grpc_inference_with_tritonclient(grpc_client):
    for headers in (None, {"infer-key": "infer-value"},  # the HTTP header, not the gRPC one
                    {PREFIX + "infer-key": "wrong"}, {PREFIX + "admin-key": "admin-value"}):
        grpc_refused(grpc_client.infer, "infer-key", model_name="params",
                     inputs=grpc_inputs(), headers=headers)
    result = grpc_client.infer("params", grpc_inputs(),
                               headers={PREFIX + "infer-key": "infer-value"})
    assert seen_parameters(result) == {}


def test_grpc_one_header_for_two_groups(grpc_client):
    admin = {PREFIX + "admin-key": "admin-value"}
    grpc_refused(grpc_client.get_model_config, "admin-key", model_name="params")
    grpc_refused(grpc_client.get_model_repository_index, "admin-key",
                 headers={PREFIX + "infer-key": "infer-value"})
    assert grpc_client.get_model_config("params", headers=admin).config.name == "params"
    assert [m.name for m in grpc_client.get_model_repository_index(headers=admin).models] == [
        "params"]
    grpc_refused(grpc_client.get_system_shared_memory_status, "shm-key",
                 headers={PREFIX + "shm-key": "a=b"})
    assert not grpc_client.get_system_shared_memory_status(
        headers={PREFIX + "shm-key": "a=b:c"}).regions


def test_grpc_unrestricted_groups_need_no_header(grpc_client):
    for headers in (None, {PREFIX + "admin-key": "wrong"}):
        assert grpc_client.is_server_live(headers=headers)
        assert grpc_client.is_model_ready("params", headers=headers)
        assert grpc_client.get_server_metadata(headers=headers).name == "naiad"
        assert grpc_client.get_model_metadata("params", headers=headers).name == "params"
        stats = grpc_client.get_inference_statistics("params", headers=headers)
        assert stats.model_stats[0].name == "params"
        assert grpc_client.get_log_settings(headers=headers).settings
        assert grpc_client.get_trace_settings(headers=headers).settings


def stream_with_tritonclient(url: str, headers: dict | None) -> object:
    """One request over ModelStreamInfer with tritonclient; its result or its error."""
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(lambda result, error: answers.put(error or result), headers=headers)
        try:
            try:
                client.async_stream_infer("params", grpc_inputs())
            except InferenceServerException:
                pass  # the stream was refused already: the callback has the error
            return answers.get(timeout=30)
        finally:
            client.stop_stream()


def test_grpc_stream_with_tritonclient(some_groups):
    error = stream_with_tritonclient(some_groups.grpc_url, None)
    assert isinstance(error, InferenceServerException)
    assert error.status() == "StatusCode.UNAVAILABLE"
    assert error.message() == grpc_refusal("infer-key")
    result = stream_with_tritonclient(some_groups.grpc_url, {PREFIX + "infer-key": "infer-value"})
    assert seen_parameters(result) == {}
