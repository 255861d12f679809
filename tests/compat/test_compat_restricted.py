"""Endpoint restrictions (``--http-restricted-api``, ``--grpc-restricted-protocol``), both
servers: the same requests, with and without the header, must get the same status and, when
refused, the same message word for word (HTTP 403 ``This API is restricted, expecting header
'<key>'``; gRPC UNAVAILABLE ``This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'``). Health and the repository index stay open: the suite's
start-up check uses them.
"""

from __future__ import annotations

from typing import Any

import pytest
from compat_helpers import Case, both, check_infer, error_message, on_both

pytestmark = pytest.mark.compat

grpc = pytest.importorskip("grpc")
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.grpc import service_pb2_grpc as pbg  # noqa: E402

# Two groups share a key written with capitals and a value holding ":" and "=".
SPECS = ("inference:infer-key=infer-value", "model-config,statistics:Admin-Key=se=cr:et")
COMPAT_SERVER_ARGS = [arg for spec in SPECS
                      for arg in (f"--http-restricted-api={spec}",
                                  f"--grpc-restricted-protocol={spec}")]

COMPAT_MODELS = ("add_sub",)  # the only model these requests name

INFER = {"inputs": [
    {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [5, 6, 7, 8]},
]}
INFER_PATH = "/v2/models/add_sub/infer"
RIGHT_INFER = {"infer-key": "infer-value"}
RIGHT_ADMIN = {"admin-key": "se=cr:et"}  # HTTP header names ignore case

REFUSED_HTTP = [
    Case("infer-no-header", "POST", INFER_PATH, INFER),
    Case("infer-wrong-value", "POST", INFER_PATH, INFER, {"infer-key": "infer-valu"}),
    Case("infer-other-groups-header", "POST", INFER_PATH, INFER, RIGHT_ADMIN),
    Case("infer-wrong-method", "GET", INFER_PATH),
    Case("infer-unknown-model", "POST", "/v2/models/nope/infer", INFER),
    Case("config-no-header", "GET", "/v2/models/add_sub/config"),
    Case("config-value-cut-at-colon", "GET", "/v2/models/add_sub/config", None,
         {"Admin-Key": "se=cr"}),
    Case("stats-infer-header", "GET", "/v2/models/stats", None, RIGHT_INFER),
    Case("model-stats-no-header", "GET", "/v2/models/add_sub/versions/1/stats"),
]

ALLOWED_HTTP = [
    Case("config", "GET", "/v2/models/add_sub/config", None, RIGHT_ADMIN),
    Case("stats", "GET", "/v2/models/add_sub/stats", None, {"ADMIN-KEY": "se=cr:et"}),
    Case("infer-wrong-method-with-header", "GET", INFER_PATH, None, RIGHT_INFER),
    Case("infer-unknown-model-with-header", "POST", "/v2/models/nope/infer", INFER,
         RIGHT_INFER),
    Case("metadata-unrestricted", "GET", "/v2/models/add_sub"),
    Case("ready-unrestricted", "GET", "/v2/models/add_sub/ready", None, {"infer-key": "x"}),
    Case("index-unrestricted", "POST", "/v2/repository/index", {}),
]


@pytest.mark.parametrize("case", [c.param() for c in REFUSED_HTTP])
def test_http_refused(servers: Any, case: Case) -> None:
    t, n = both(servers, case)
    assert t.status == 403, f"Triton no longer refuses this: {t!r}"
    assert n.status == t.status, f"triton {t!r}, naiad {n!r}"
    assert error_message(n) == error_message(t)


@pytest.mark.parametrize("case", [c.param() for c in ALLOWED_HTTP])
def test_http_allowed(servers: Any, case: Case) -> None:
    t, n = both(servers, case)
    assert t.status != 403, f"Triton refuses this now: {t!r}"
    assert n.status == t.status, f"triton {t!r}, naiad {n!r}"


def test_http_infer_with_header(servers: Any) -> None:
    check_infer(*both(servers, Case("infer", "POST", INFER_PATH, INFER, RIGHT_INFER)))


def infer_request() -> Any:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[4])
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    return request


def grpc_outcome(url: str, method: str, metadata: list[tuple[str, str]]) -> tuple[str, str]:
    """(status code name, details) of one call; a stream sends two requests."""
    requests = {
        "ModelInfer": infer_request(),
        "ModelConfig": pb.ModelConfigRequest(name="add_sub"),
        "ModelStatistics": pb.ModelStatisticsRequest(name="add_sub"),
        "ModelMetadata": pb.ModelMetadataRequest(name="add_sub"),
        "ServerLive": pb.ServerLiveRequest(),
    }
    with grpc.insecure_channel(url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        try:
            if method == "ModelStreamInfer":
                answers = list(stub.ModelStreamInfer(iter([infer_request(), infer_request()]),
                                                     metadata=metadata, timeout=30))
                return "OK", "|".join(a.error_message for a in answers)
            getattr(stub, method)(requests[method], metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or ""
    return "OK", ""


P = "triton-grpc-protocol-"
GRPC_CASES = [
    ("ModelInfer", [], "UNAVAILABLE"),
    ("ModelInfer", [(P + "infer-key", "wrong")], "UNAVAILABLE"),
    ("ModelInfer", [("infer-key", "infer-value")], "UNAVAILABLE"),
    ("ModelInfer", [(P + "infer-key", "infer-value")], "OK"),
    ("ModelStreamInfer", [], "UNAVAILABLE"),
    ("ModelStreamInfer", [(P + "infer-key", "infer-value")], "OK"),
    # A capital in the key: gRPC keys are lowercase, so no call can ever carry it.
    ("ModelConfig", [(P + "admin-key", "se=cr:et")], "UNAVAILABLE"),
    ("ModelStatistics", [], "UNAVAILABLE"),
    ("ModelMetadata", [], "OK"),
    ("ServerLive", [(P + "infer-key", "x")], "OK"),
]


@pytest.mark.parametrize(("method", "metadata", "code"), GRPC_CASES,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(GRPC_CASES)])
def test_grpc(servers: Any, method: str, metadata: list[tuple[str, str]], code: str) -> None:
    t, n = on_both(lambda s: grpc_outcome(s.grpc_url, method, metadata),
                   servers.triton, servers.naiad)
    assert t[0] == code, f"Triton answers {t!r} now"
    assert n == t, f"triton {t!r}, naiad {n!r}"
